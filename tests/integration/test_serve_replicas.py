"""`orch serve` replicas on one PostgreSQL store (issue 38, part 1): each in a home of its
own, as on two machines. One holds the store's lease and runs the scheduler's duties; when
it is killed (SIGKILL) or stopped (SIGTERM), another takes over within seconds. A second
server on a SQLite store is refused with one message. The test starts its servers and
stops exactly them."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

import pytest

from tests.conftest import run_orch, short_tmp
from tests.integration.conftest import remove_home, wait_until
from tests.integration.test_serve import Server

pytestmark = pytest.mark.integration


def role(server: Server):
    try:
        with urllib.request.urlopen(server.url + "/healthz", timeout=2) as r:
            return json.loads(r.read())["scheduler"]
    except OSError:
        return None


@pytest.fixture
def store(postgres_server):
    from tests import pgserver

    name, url = pgserver.create_schema(postgres_server)
    try:
        yield url
    finally:
        pgserver.drop_schema(postgres_server, name)


def test_one_replica_leads_and_another_takes_over_when_it_dies_or_stops(store):
    homes = [short_tmp(f"orp{i}") for i in range(3)]
    env = {"ORCH_DATABASE_URL": store}
    servers: list[Server] = []
    try:
        servers = [Server(h, env=env) for h in homes[:2]]
        wait_until("one replica to lead", lambda: sorted(map(role, servers)) == ["leading", "standby"],
                   timeout=30)
        leader = next(s for s in servers if role(s) == "leading")
        standby = next(s for s in servers if s is not leader)
        time.sleep(3)  # a standby looks every 2 s: still one leader after a few looks
        assert (role(leader), role(standby)) == ("leading", "standby")

        killed = time.monotonic()
        leader.proc.send_signal(signal.SIGKILL)
        leader.proc.wait(10)
        wait_until("the standby to take over", lambda: role(standby) == "leading", timeout=20)
        took_over_s = time.monotonic() - killed
        assert took_over_s < 10, took_over_s
        assert "took on the scheduler's duties" in standby.log.read_text()

        third = Server(homes[2], env=env)  # a rolling restart: the new one waits its turn
        servers.append(third)
        wait_until("the new replica to answer as a standby", lambda: role(third) == "standby", timeout=10)
        stopped = time.monotonic()
        standby.stop()  # SIGTERM: its pass finishes, and the lease is given up
        assert standby.proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
        wait_until("the new replica to take over", lambda: role(third) == "leading", timeout=20)
        handed_s = time.monotonic() - stopped
        print(f"\ntaken over {took_over_s:.1f} s after SIGKILL, {handed_s:.1f} s after SIGTERM")
    finally:
        for s in servers:
            s.stop()
        for h in homes:
            remove_home(h)


def test_a_second_server_on_a_sqlite_store_is_refused(tmp_path):
    home = short_tmp("ors")
    first = Server(home, env={"ORCH_DATABASE_URL": ""})
    try:
        second = run_orch(home, "serve", "--port", str(first.port), ORCH_DATABASE_URL="", timeout=60)
        assert second.returncode != 0 and "Traceback" not in second.stderr, second.stderr
        assert (f"another orch serve (pid {first.proc.pid}) serves the SQLite store {home / 'orch.db'}: "
                "a SQLite store has one server") in second.stderr, second.stderr
        assert "database_url" in second.stderr
        assert role(first) == "leading"
    finally:
        first.stop()
        remove_home(home)
