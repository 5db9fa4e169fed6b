"""Shared test helpers: an isolated ORCH_HOME, and running the real `orch` CLI."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import pytest

pytest_plugins = ["pytester"]  # tests/unit/test_scheduling.py runs pytest on its own files

ROOT = Path(__file__).resolve().parent.parent
ORCH = str(Path(sys.executable).with_name("orch"))

# The user's cache folder (what orch keeps of SkyPilot, orchestrator/base/skycache.py): one for each
# pytest process, shared by the processes it starts, removed at its end. Made in pytest's
# configure step, not at import: the helper processes that import this module (Ray's
# workers, tests/writer_process.py) left one behind each.
_CACHE: list[str] = []


def pytest_unconfigure(config):
    for path in _CACHE:
        shutil.rmtree(path, ignore_errors=True)


def job_row(rec: dict):
    """A job written as a test's dict table, as the typed store row (records.JobRow) the
    code reads: the table's keys must be the row's fields."""
    from orchestrator.records import JobRow

    return JobRow.model_validate(rec)


def short_tmp(prefix: str) -> Path:
    # Ray's unix sockets need a short temp path; pytest's tmp_path is too long.
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def orch_env(home: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORCH_", "RAY_"))}
    if store_url(home):  # the PostgreSQL pass: this home's or this test's own schema
        env["ORCH_DATABASE_URL"] = store_url(home)
    env.update(ORCH_HOME=str(home), ORCH_CONFIG=str(home / "config.toml"), ORCH_MODE="local",
               SKYPILOT_DISABLE_USAGE_COLLECTION="1", AWS_EC2_METADATA_DISABLED="true",
               COLUMNS="200")
    env.update(extra)
    return env


def run_orch(home: Path, *args: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([ORCH, *args], env=orch_env(home, **env), capture_output=True,
                          text=True, timeout=timeout, cwd=str(ROOT), stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def environment(env: dict):
    """os.environ replaced by `env` for the block, then restored."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _in_process(home: Path, env: dict, ask):
    """`ask(client)` on this home's embedded client, in this process, under the environment
    `orch` would get (orch_env): the same answers as the CLI's `--json`."""
    from orchestrator.client import Local
    from orchestrator.settings import load_settings

    with environment(orch_env(home, **env)):
        local = Local(load_settings())
        try:
            return ask(local)
        finally:
            local.close()


def plan_in_process(home: Path, job_file: Path, **env: str) -> dict:
    """`orch plan FILE --json`, in this process: for a test that replaces the cloud's
    credential check (monkeypatch providers.cloud.enabled_clouds) and keeps the rest real
    (the cluster it reads, the catalogs)."""
    return _in_process(home, env, lambda local: local.plan(job_file).model_dump(mode="json"))


def status_in_process(home: Path, job_id: str, **env: str) -> dict:
    """`orch status ID --json`, in this process: for the loops that wait on a job, which
    would otherwise start an orch process a second and take the CPU from the job."""
    return _in_process(home, env, lambda local: local.job(job_id).to_json())


def list_in_process(home: Path, limit: int = 1000, **env: str) -> list[dict]:
    """`orch status --limit N --json`, in this process."""
    return _in_process(home, env, lambda local: [j.to_json() for j in local.jobs(limit)])


def run_json(home: Path, *args: str, **kw) -> object:
    proc = run_orch(home, *args, "--json", **kw)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# Settings that change what `orch simulate` and placement decide: a test of their figures
# runs with the defaults, whatever the shell that started pytest sets.
_DECIDING_ENV = ("ORCH_MODE", "ORCH_CLOUDS", "ORCH_CATALOG_DIR", "ORCH_CURRENCY", "ORCH_CURRENCY_RATE",
                 "ORCH_CLOUD_STARTUP_MINUTES", "ORCH_MAX_WAIT_MINUTES", "ORCH_ELECTRICITY_PRICE",
                 "ORCH_EXPLORATORY_WAIT_MINUTES")


@pytest.fixture
def no_orch_env(monkeypatch):
    """None of the shell's ORCH_ settings: a test of placement's figures reads the defaults
    (use with `pytestmark = pytest.mark.usefixtures("no_orch_env")`)."""
    for k in list(os.environ):
        if k.startswith("ORCH_"):
            monkeypatch.delenv(k)


@pytest.fixture
def default_settings(monkeypatch):
    """Settings() with none of the environment that changes a decision."""
    from orchestrator.settings import Settings

    for k in _DECIDING_ENV:
        monkeypatch.delenv(k, raising=False)
    return Settings()


@pytest.fixture
def orch_home():
    home = short_tmp("oh")
    yield home
    shutil.rmtree(home, ignore_errors=True)


# -- the job store: SQLite, PostgreSQL, or both in one run ---------------------------------

# The tests of the store and of what reads and writes it (the service, the server: claims,
# once-per-slot schedules, recovery after a crash). `make test` (--store both) runs each of
# them twice in the same run, on SQLite and on PostgreSQL; the tests of parsing, rendering,
# uploads or the browser page do not depend on which store it is and run on SQLite only.
# In these files, tests that check the SQLite file itself are marked sqlite_only, and serve
# tests whose subject is not the store store_incidental: both run on SQLite only.
BOTH_STORES = (
    "tests/unit/store/test_store.py", "tests/unit/store/test_store_pg.py", "tests/unit/service/test_service.py",
    "tests/unit/store/test_job_pages.py", "tests/unit/server/test_page_api.py",
    "tests/unit/server/test_serve_unit.py", "tests/unit/offers/test_many_writers.py",
    "tests/unit/base/test_secrets.py", "tests/unit/cli/test_schedule_cli.py", "tests/unit/server/test_records.py",
    "tests/unit/server/test_metrics.py", "tests/unit/store/test_lease.py", "tests/unit/store/test_shared.py",
    "tests/unit/service/test_upload_sharing.py", "tests/unit/server/test_replicas.py",
    "tests/unit/store/test_pool.py", "tests/unit/server/test_replace_queued.py",
    "tests/integration/test_serve.py", "tests/integration/test_serve_queue.py",
    "tests/integration/test_crash_safety.py",
)
_ON_SQLITE_ONLY = ("sqlite_only", "store_incidental")


def pytest_addoption(parser):
    parser.addoption("--store", choices=("sqlite", "postgresql", "both"), default="sqlite",
                     help="the job store the tests use. sqlite (the default): every test on "
                          "SQLite; postgresql: only the store-backed tests (BOTH_STORES in "
                          "tests/conftest.py), on PostgreSQL; both (make test): every test on "
                          "SQLite and the store-backed ones on PostgreSQL too. PostgreSQL is "
                          "ORCH_TEST_DATABASE_URL, or a server started from this machine's "
                          "PostgreSQL binaries")


def _store_backed(nodeid: str) -> bool:
    return nodeid.partition("::")[0] in BOTH_STORES


def pytest_generate_tests(metafunc):
    """With --store both, a store-backed test runs on each store: `store_kind` takes both
    values, grouped by module, so that a module's server (test_serve.py's) is started once
    for each store."""
    if metafunc.config.getoption("--store") != "both" or "store_kind" not in metafunc.fixturenames:
        return
    if not _store_backed(metafunc.definition.nodeid):
        return
    if any(metafunc.definition.get_closest_marker(m) for m in _ON_SQLITE_ONLY):
        return
    metafunc.parametrize("store_kind", ["sqlite", "postgresql"], indirect=True, scope="module")


@pytest.fixture(scope="module")
def store_kind(request) -> str:
    """The store this test's orch uses: "sqlite" or "postgresql"."""
    given = getattr(request, "param", None)
    if given:
        return given
    option = request.config.getoption("--store")
    return "sqlite" if option == "both" else option


_SPANS = None  # tests.scheduling.Spans, made at configure


def pytest_configure(config):
    global _SPANS
    from tests.scheduling import Spans

    _SPANS = Spans()
    _CACHE.append(tempfile.mkdtemp(prefix="orch-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = _CACHE[-1]
    config.addinivalue_line("markers", "sqlite_only: see pyproject.toml")
    config.addinivalue_line("markers", "store_incidental: see pyproject.toml")


def pytest_collection_modifyitems(config, items):
    """With --store postgresql, the store-backed tests only. Then checked and ordered as
    tests/scheduling.py says (a stable sort: each file keeps its order)."""
    from tests import scheduling

    if config.getoption("--store") == "postgresql":
        left_out = [item for item in items if not _store_backed(item.nodeid)]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if _store_backed(item.nodeid)]
    scheduling.check(items)
    xdist = bool(os.environ.get("PYTEST_XDIST_WORKER"))
    items.sort(key=lambda item: scheduling.sort_key(item, xdist))


def pytest_xdist_make_scheduler(config, log):
    """`pytest -n 3` (make test): each shared Ray's tests in one process (tests/scheduling.py);
    another `--dist` than the default is left to xdist."""
    if config.getoption("dist") != "load":
        return None
    from tests import scheduling

    return scheduling.make_scheduler(config, log)


def pytest_runtest_logreport(report):
    _SPANS.add(report)


def pytest_terminal_summary(terminalreporter):
    lines = _SPANS.lines()
    if lines:
        terminalreporter.write_sep("-", "the test processes")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_report_header(config):
    option = config.getoption("--store")
    if option == "sqlite":
        return ["job store: SQLite"]
    from tests import pgserver

    given = os.environ.get("ORCH_TEST_DATABASE_URL")
    why = None if given else pgserver.unavailable()
    where = ("ORCH_TEST_DATABASE_URL" if given else "a server started for this run") if why is None \
        else f"unavailable, its tests skip: {why}"
    if option == "both":
        return [f"job store: SQLite; the store-backed tests on PostgreSQL too ({where})"]
    return [f"job store: PostgreSQL ({where})"]


@pytest.fixture(scope="session")
def postgres_server():
    """The PostgreSQL server the run's PostgreSQL tests share (one per pytest process), started
    the first time one needs it: its URL."""
    given = os.environ.get("ORCH_TEST_DATABASE_URL")
    if given:
        yield given
        return
    from tests import pgserver

    why = pgserver.unavailable()
    if why:
        pytest.skip(f"PostgreSQL store tests skipped: {why}")
    server = pgserver.PgServer()
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres_base(request, store_kind):
    """The PostgreSQL server's URL where this test runs on PostgreSQL; None on SQLite."""
    if store_kind != "postgresql":
        return None
    return request.getfixturevalue("postgres_server")


@pytest.fixture(autouse=True)
def job_store(request, postgres_base, monkeypatch):
    """A test on PostgreSQL: its orch (in this process and the processes it starts) uses a
    fresh schema of its own through ORCH_DATABASE_URL."""
    if postgres_base is None:
        monkeypatch.delenv("ORCH_DATABASE_URL", raising=False)
        yield None
        return
    if request.node.get_closest_marker("sqlite_only"):
        pytest.skip("checks the SQLite store file itself")
    if request.node.get_closest_marker("store_incidental"):
        pytest.skip("its subject is not the store (runs on SQLite; the store's own tests run on PostgreSQL)")
    from tests import pgserver

    name, url = pgserver.create_schema(postgres_base)
    monkeypatch.setenv("ORCH_DATABASE_URL", url)
    try:
        yield url
    finally:
        pgserver.drop_schema(postgres_base, name)


_HOME_STORES: dict[str, str] = {}  # a home shared by several tests -> its own schema


@contextlib.contextmanager
def home_store(home: Path, postgres_base: Optional[str]):
    """For a home that outlives one test (a module's server): in the PostgreSQL pass, a
    schema of its own for as long as the home, which orch_env/store_at use for it."""
    if postgres_base is None:
        yield None
        return
    from tests import pgserver

    name, url = pgserver.create_schema(postgres_base)
    _HOME_STORES[str(home)] = url
    try:
        yield url
    finally:
        _HOME_STORES.pop(str(home), None)
        pgserver.drop_schema(postgres_base, name)


def store_url(home: Path) -> Optional[str]:
    """The PostgreSQL URL a home's orch uses in the PostgreSQL pass; None on SQLite."""
    return _HOME_STORES.get(str(home)) or os.environ.get("ORCH_DATABASE_URL")


def store_where(home: Path):
    """What `Store()` opens for a test's home: its PostgreSQL URL, or the SQLite file."""
    return store_url(home) or home / "orch.db"


def store_at(home: Path):
    from orchestrator.store import Store

    return Store(store_where(home))


def store_created(home: Path) -> bool:
    """Whether anything wrote the job store: on SQLite, whether its file exists; on
    PostgreSQL, where reading a store creates its (empty) tables, whether it holds a job."""
    url = store_url(home)
    if not url:
        return (home / "orch.db").exists()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        if not conn.execute("SELECT count(*) FROM information_schema.tables WHERE table_schema "
                            "= current_schema() AND table_name = 'jobs'").fetchone()[0]:
            return False
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0] > 0


def store_text(home: Path) -> str:
    """Everything the job store holds, as text, to look for what must never be stored: the
    SQLite file with its WAL, or every row of every table in the test's schema."""
    url = store_url(home)
    if not url:
        return "".join(p.read_bytes().decode("latin-1")
                       for p in [home / "orch.db", *home.glob("orch.db-*")] if p.exists())
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables "
                                             "WHERE table_schema = current_schema()")]
        return "\n".join(str(row) for t in tables
                         for row in conn.execute(f'SELECT row_to_json(t)::text FROM "{t}" t'))


def serve_settings(tmp_path: Path, monkeypatch, **settings):
    """Settings for an in-process `orch serve` app on a fresh home (only the PostgreSQL
    pass's ORCH_DATABASE_URL kept from the environment), and alice's token in its store."""
    from orchestrator.server import auth
    from orchestrator.settings import Settings

    for k in list(os.environ):
        if k.startswith("ORCH_") and k != "ORCH_DATABASE_URL":
            monkeypatch.delenv(k)
    # A local-only server: its admin trusts its team with its machine (serve_local_trusted).
    s = Settings(home=tmp_path / "home", mode="local", **{"serve_local_trusted": True, **settings})
    store = store_at(s.home)
    token, digest = auth.new_token()
    store.add_token("alice", digest)
    store.close()
    return s, token
