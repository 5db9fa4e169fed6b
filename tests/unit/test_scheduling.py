"""tests/scheduling.py: the units `make test`'s processes share the suite in."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests import scheduling
from tests.conftest import ROOT

# The inner pytest runs without the plugins these tests do not use: schemathesis's and
# hypothesis's imports were 1.6 of its 2.0 CPU-seconds.
LEAN = ("-p", "no:schemathesis", "-p", "no:hypothesispytest")


def item(nodeid, *fixtures, integration=True):
    marks = {"integration": object()} if integration else {}
    return SimpleNamespace(nodeid=nodeid, fixturenames=list(fixtures),
                           get_closest_marker=marks.get)


def test_a_files_tests_share_its_unit_unless_one_is_named_alone():
    onprem = "tests/integration/test_onprem.py::test_cluster_status"
    assert scheduling.unit_of(onprem) == "two-node-cluster"
    travel = "tests/integration/test_secrets_travel.py::"
    assert scheduling.unit_of(travel + "test_local_jobs_see_their_secrets_and_nothing_keeps_them") == "local-ray-serve"
    assert scheduling.unit_of("tests/integration/test_local_jobs.py::test_x") == "local-ray"
    assert scheduling.unit_of(travel + "test_on_prem_jobs_see_their_secrets_and_nothing_keeps_them") == "two-node-cluster"
    assert scheduling.unit_of("tests/unit/server/test_api_fuzz.py::test_no_operation[GET /v1/jobs]") == "api-fuzz"
    assert scheduling.unit_of("tests/unit/store/test_store.py::test_x") is None


def test_a_shared_ray_test_missing_from_its_unit_is_a_usage_error_naming_it():
    scheduling.check([item("tests/integration/test_onprem.py::test_a", "cluster"),
                      item("tests/unit/store/test_store.py::test_b", "tmp_path", integration=False)])
    with pytest.raises(pytest.UsageError, match="test_new.py::test_c: uses local-ray or local-ray-serve, listed under nothing"):
        scheduling.check([item("tests/integration/test_new.py::test_c", "ray_home")])
    with pytest.raises(pytest.UsageError, match="uses no shared Ray, listed under two-node-cluster"):
        scheduling.check([item("tests/integration/test_onprem.py::test_d", "tmp_path")])
    with pytest.raises(pytest.UsageError, match="uses local-ray or local-ray-serve or two-node-cluster"):
        scheduling.check([item("tests/integration/test_onprem.py::test_e", "cluster", "ray_home")])


def test_under_xdist_the_shared_rays_come_first_and_the_unit_tests_last():
    items = [item("tests/unit/store/test_store.py::test_a", integration=False),
             item("tests/integration/test_multinode.py::test_b"),
             item("tests/integration/test_onprem.py::test_c", "cluster"),
             item("tests/integration/test_local_jobs.py::test_d", "ray_home")]
    order = [i.nodeid.split("::")[1] for i in sorted(items, key=lambda i: scheduling.sort_key(i, True))]
    assert order == ["test_d", "test_c", "test_b", "test_a"]
    order = [i.nodeid.split("::")[1] for i in sorted(items, key=lambda i: scheduling.sort_key(i, False))]
    assert order == ["test_a", "test_d", "test_c", "test_b"]


def test_in_either_way_a_shared_rays_tests_follow_each_other():
    items = [item("tests/integration/test_crash_safety.py::test_a", "ray_home"),
             item("tests/integration/test_onprem.py::test_b", "cluster"),
             item("tests/integration/test_local_jobs.py::test_c", "ray_home"),
             item("tests/integration/test_runner_host.py::test_d", "ray_home")]
    for xdist in (True, False):
        order = [i.nodeid.split("::")[1] for i in sorted(items, key=lambda i: scheduling.sort_key(i, xdist))]
        # The local Ray's two units, each whole, then the cluster's.
        assert order == ["test_c", "test_d", "test_a", "test_b"]
    # A test listed under the other unit of the same Ray is no usage error.
    scheduling.check([item("tests/integration/test_crash_safety.py::test_a", "ray_home"),
                      item("tests/integration/test_local_jobs.py::test_c", "ray_home")])


def test_a_shared_ray_stops_after_its_last_test_and_starts_again_if_a_later_one_asks(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # the inner pytest imports the real hook
    log = pytester.path / "log"
    pytester.makeconftest(f"""
        import pytest
        from tests.integration.conftest import pytest_runtest_teardown  # noqa: F401

        def note(what):
            with open({str(log)!r}, "a") as f:
                f.write(what + " ")

        @pytest.fixture(scope="session")
        def ray_home():
            note("up")
            yield
            note("down")

        @pytest.fixture(scope="module")
        def server(ray_home):
            yield
            note("server-down")
    """)
    pytester.makepyfile(test_shared="""
        from conftest import note

        def test_1(ray_home, server):
            note("t1")

        def test_2(ray_home):
            note("t2")

        def test_3():
            note("t3")

        def test_4(ray_home):
            note("t4")
    """)
    pytester.runpytest_subprocess("-p", "no:cacheprovider", *LEAN).assert_outcomes(passed=4)
    # What uses the Ray is stopped with it; the Ray starts again for the one test that asks.
    assert log.read_text().split() == ["up", "t1", "t2", "server-down", "down", "t3", "up", "t4", "down"]


def test_store_both_runs_the_store_backed_tests_on_each_store_and_the_rest_on_sqlite():
    import subprocess
    import sys

    def collected(*args):
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", *LEAN,
                               *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return {line for line in proc.stdout.splitlines() if "::" in line}

    store, other = "tests/unit/store/test_store.py", "tests/unit/test_scheduling.py"
    both = collected("--store", "both", store, other)
    on_pg = {i for i in both if i.endswith("[postgresql]")}
    assert on_pg and {i.replace("[postgresql]", "[sqlite]") for i in on_pg} <= both
    # The SQLite file's own tests, and every test of a file that is not store-backed: once.
    assert f"{store}::test_file_mode" in both and f"{store}::test_file_mode[postgresql]" not in both
    assert all(i.startswith(store) for i in on_pg) and any(i.startswith(other) for i in both)
    assert not [i for i in both if i.startswith(other) and "[" in i.split("::")[1]]
    # --store postgresql: the store-backed files only (the SQLite ones skip as they run).
    sqlite_only = {f"{store}::test_file_mode", f"{store}::test_corrupt_store_is_a_clear_error"}
    assert collected("--store", "postgresql", store, other) == {
        i.replace("[postgresql]", "") for i in on_pg} | sqlite_only


def test_the_spans_say_how_long_each_process_ran_tests():
    spans = scheduling.Spans()
    spans.cpu_at_start = (0.0, 0.0)  # as if the run began at boot

    def report(gw, when, start, stop):
        node = SimpleNamespace(gateway=SimpleNamespace(id=gw))
        return SimpleNamespace(node=node, when=when, start=start, stop=stop, duration=stop - start)

    for r in (report("gw0", "setup", 100, 110), report("gw0", "call", 110, 130),
              report("gw1", "call", 101, 105), SimpleNamespace(when="call", start=0, stop=9)):
        spans.add(r)
    lines = spans.lines()
    assert lines[:2] == ["gw0: 1 tests, 30 s in tests, its last ended 30 s after the first began",
                         "gw1: 1 tests, 4 s in tests, its last ended 5 s after the first began"]
    assert len(lines) == 3 and lines[2].startswith("this machine's CPUs: busy ")
