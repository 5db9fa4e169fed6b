"""tests/scheduling.py: the units `make test`'s two processes share the suite in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import scheduling


def item(nodeid, *fixtures, integration=True):
    marks = {"integration": object()} if integration else {}
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures),
                           get_closest_marker=marks.get)


def test_a_files_tests_share_its_unit_unless_one_is_named_alone():
    onprem = "tests/integration/test_onprem.py::test_cancel_on_prem_job"
    assert scheduling.unit_of(onprem) == "two-node-cluster"
    travel = "tests/integration/test_secrets_travel.py::"
    assert scheduling.unit_of(travel + "test_local_jobs_see_their_secrets_and_nothing_keeps_them") == "local-ray"
    assert scheduling.unit_of(travel + "test_on_prem_jobs_see_their_secrets_and_nothing_keeps_them") == "two-node-cluster"
    assert scheduling.unit_of("tests/unit/test_api_fuzz.py::test_no_operation[GET /v1/jobs]") == "api-fuzz"
    assert scheduling.unit_of("tests/unit/test_store.py::test_x") is None


def test_a_shared_ray_test_missing_from_its_unit_is_a_usage_error_naming_it():
    scheduling.check([item("tests/integration/test_onprem.py::test_a", "cluster"),
                      item("tests/unit/test_store.py::test_b", "tmp_path", integration=False)])
    with pytest.raises(pytest.UsageError, match="test_new.py::test_c: uses local-ray, listed under nothing"):
        scheduling.check([item("tests/integration/test_new.py::test_c", "ray_home")])
    with pytest.raises(pytest.UsageError, match="uses no shared Ray, listed under two-node-cluster"):
        scheduling.check([item("tests/integration/test_onprem.py::test_d", "tmp_path")])
    with pytest.raises(pytest.UsageError, match="uses local-ray, two-node-cluster"):
        scheduling.check([item("tests/integration/test_onprem.py::test_e", "cluster", "ray_home")])


def test_under_xdist_the_shared_rays_come_first_and_the_unit_tests_last():
    items = [item("tests/unit/test_store.py::test_a", integration=False),
             item("tests/integration/test_multinode.py::test_b"),
             item("tests/integration/test_onprem.py::test_c", "cluster"),
             item("tests/integration/test_local_jobs.py::test_d", "ray_home")]
    order = [i.nodeid.split("::")[1] for i in sorted(items, key=lambda i: scheduling.sort_key(i, True))]
    assert order == ["test_d", "test_c", "test_b", "test_a"]
    order = [i.nodeid.split("::")[1] for i in sorted(items, key=lambda i: scheduling.sort_key(i, False))]
    assert order == ["test_a", "test_b", "test_c", "test_d"]
