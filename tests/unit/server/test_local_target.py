"""A client's job never runs on `orch serve`'s own machine, as the server's user, unless the
admin trusts the team with the server's home (`serve_local_trusted`, issue 46): refused at
intake, left out of placement, refused again at launch; `orch doctor` says which it is."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.base.errors import InputError
from orchestrator.server import client_policy
from orchestrator.service.doctor import serve_local_check
from orchestrator.service.planning import gather_offers
from orchestrator.settings import Settings
from orchestrator.spec import load_spec_text

HOME = Path("/nonexistent/home")
BODY = SimpleNamespace(file=None, upload=None, env={}, secrets={}, idempotency_key=None)


def serving(**kw) -> Settings:
    s = Settings(home=HOME, **kw)
    s._serves_clients = True  # as cli/serve.py marks them
    return s


def test_a_clients_job_bound_for_the_servers_machine_is_refused_unless_trusted():
    anywhere = load_spec_text("run: env\n")
    only_local = load_spec_text("run: env\nplacement: {allow: [local]}\n")
    hybrid = serving(mode="hybrid", ray_address="http://10.0.0.9:8265")
    # The attack: `placement: {allow: [local]}` on a hybrid server.
    with pytest.raises(InputError, match=r"placement\.allow: the local target runs on the "
                                         r"server's own machine, as the server's user"):
        client_policy.check(only_local, BODY, "bob", hybrid)
    client_policy.check(anywhere, BODY, "bob", hybrid)  # the cluster can take it
    # Placed on `local` (queued before the admin changed the setting): refused at launch.
    with pytest.raises(InputError, match="serve_local_trusted is false"):
        client_policy.check_launch(anywhere, "bob", hybrid, "local")
    client_policy.check_launch(anywhere, "bob", hybrid, "onprem")
    client_policy.check_launch(anywhere, None, hybrid, "local")  # the server's own job
    # A local-only server has no other place: every client's job is refused, saying how.
    with pytest.raises(InputError, match="this server is in local-only mode") as refused:
        client_policy.check(anywhere, BODY, "bob", serving(mode="local"))
    assert "serve_local_trusted = true" in (refused.value.hint or "")
    # Trusted: as before.
    trusted = serving(mode="local", serve_local_trusted=True)
    client_policy.check(only_local, BODY, "bob", trusted)
    client_policy.check_launch(anywhere, "bob", trusted, "local")


def test_placement_under_orch_serve_has_no_local_offer_unless_trusted():
    spec = load_spec_text("run: env\n")
    hybrid = dict(mode="hybrid", onprem=[{"gpu": "A100", "count": 2, "purchase_price": 1000}])
    assert {o.target for o in gather_offers(spec, serving(**hybrid))} == {"onprem"}
    assert {o.target for o in gather_offers(spec, serving(serve_local_trusted=True, **hybrid))} \
        == {"onprem", "local"}
    assert "local" in {o.target for o in gather_offers(spec, Settings(home=HOME, **hybrid))}


@pytest.mark.parametrize("settings, serving_team, words", [
    (dict(mode="local"), True, "refused to clients: this home is in local-only mode"),
    (dict(mode="hybrid", ray_address="http://h:8265"), True,
     "refused to clients: `orch serve` sends their jobs to the cluster or a cloud"),
    (dict(mode="local", serve_local_trusted=True), True,
     "trusted team: `orch serve` runs clients' jobs on this machine as its own user"),
])
def test_doctor_says_whether_clients_jobs_may_run_on_this_machine(settings, serving_team, words):
    check = serve_local_check(Settings(home=HOME, **settings), serving_team)
    assert check.name == "local target" and check.ok is True
    assert check.detail.startswith(words), check.detail
    assert (check.fix is not None) == ("trusted" in words or "local-only" in words)


def test_the_per_user_mode_takes_clients_jobs_on_this_machine_and_doctor_says_so():
    """serve_isolation = "per-user": each client user's jobs run as an OS user of their own
    (providers/isolated.py), so the local target is offered and launched without trust."""
    spec = load_spec_text("run: env\nplacement: {allow: [local]}\n")
    isolated = serving(mode="local", serve_isolation="per-user")
    client_policy.check(spec, BODY, "bob", isolated)
    client_policy.check_launch(spec, "bob", isolated, "local")
    hybrid = dict(mode="hybrid", onprem=[{"gpu": "A100", "count": 2, "purchase_price": 1000}])
    assert {o.target for o in gather_offers(spec, serving(serve_isolation="per-user", **hybrid))} \
        == {"onprem", "local"}
    check = serve_local_check(Settings(home=HOME, mode="local", serve_isolation="per-user"), True)
    assert check.detail.startswith("per-user isolation: each client user's jobs run in a Ray "
                                   "instance of their own"), check.detail


def test_doctor_says_when_the_job_users_cannot_run_orchs_interpreter():
    import shutil
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="orch-py-", dir="/tmp"))  # pytest's tmp_path is 0700
    os.chmod(top, 0o755)
    closed = top / "closed"
    (closed / "bin").mkdir(parents=True, mode=0o755)
    (closed / "bin" / "python").write_text("")
    os.chmod(closed / "bin" / "python", 0o755)
    os.chmod(closed, 0o700)
    check = serve_local_check(Settings(home=HOME, mode="local", serve_isolation="per-user",
                                       serve_isolation_python=closed / "bin" / "python"), True)
    assert not check.ok and f"{closed} is closed to other users" in check.detail, check.detail
    assert "serve_isolation_python" in (check.fix or "")
    os.chmod(closed, 0o755)
    opened = serve_local_check(Settings(home=HOME, mode="local", serve_isolation="per-user",
                                        serve_isolation_python=closed / "bin" / "python"), True)
    assert "closed to other users" not in opened.detail, opened.detail
    shutil.rmtree(top)
