"""A throwaway PostgreSQL server on loopback for the test suite's PostgreSQL pass.

`pytest --store postgresql` (see tests/conftest.py) runs the store-backed tests against
PostgreSQL: against ORCH_TEST_DATABASE_URL when that is set, else against a server this
module starts from the machine's own PostgreSQL binaries (PATH, or Debian's
/usr/lib/postgresql/N/bin) in a temporary folder, on a free loopback port with password
authentication, and stops again. As root it runs the server as the `postgres` user
(PostgreSQL refuses to run as root). `unavailable()` says why it cannot.

Each test gets a schema of its own (`schema_url`), dropped afterwards.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional
from urllib.parse import quote

PASSWORD = "orch-test-" + uuid.uuid4().hex[:8]  # checks that orch never shows it


def binaries() -> Optional[Path]:
    """The folder holding initdb, pg_ctl and postgres; None when this machine has none."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"),
                         key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                         reverse=True):
        if os.access(f"{folder}/initdb", os.X_OK) and os.access(f"{folder}/pg_ctl", os.X_OK):
            return Path(folder)
    return None


def _runas() -> Optional[str]:
    """The user the server runs as: this one, or `postgres` when this is root."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return ""
    return "postgres"


def unavailable() -> Optional[str]:
    """Why no PostgreSQL server can be started here; None when one can."""
    if binaries() is None:
        return ("no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in /usr/lib/postgresql; "
                "`make test` installs Debian's postgresql package when it runs as root with apt-get")
    if _runas() == "":
        return "running as root, and there is no `postgres` user to run the server as"
    if _runas() and not shutil.which("runuser"):
        return "running as root, and there is no runuser to start the server as `postgres`"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    """initdb + pg_ctl start in a temporary folder; stop() ends it and removes the folder."""

    def __init__(self):
        self.bin = binaries()
        self.user = _runas()
        self.dir = Path(tempfile.mkdtemp(prefix="orch-pg-", dir="/tmp"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.started = False

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [str(a) for a in args]
        if self.user:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def start(self) -> str:
        pwfile = self.dir / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.user:
            info = pwd.getpwnam(self.user)
            os.chown(self.dir, info.pw_uid, info.pw_gid)
            os.chown(pwfile, info.pw_uid, info.pw_gid)
        os.chmod(self.dir, 0o700)
        os.chmod(pwfile, 0o600)
        init = self._run(self.bin / "initdb", "-D", self.data, "-U", "orch", "--pwfile", pwfile,
                         "--auth-local=scram-sha-256", "--auth-host=scram-sha-256",
                         "-E", "UTF8", "--locale=C.UTF-8" if _has_c_utf8() else "--no-locale")
        pwfile.unlink()
        if init.returncode != 0:
            raise RuntimeError(f"initdb failed: {init.stderr.strip() or init.stdout.strip()}")
        opts = (f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200")
        start = self._run(self.bin / "pg_ctl", "-D", self.data, "-l", self.dir / "server.log",
                          "-o", opts, "-w", "-t", "60", "start")
        if start.returncode != 0:
            log = (self.dir / "server.log")
            raise RuntimeError(f"pg_ctl start failed: {start.stderr.strip()} "
                               f"{log.read_text()[-2000:] if log.exists() else ''}")
        self.started = True
        return self.url

    @property
    def url(self) -> str:
        return f"postgresql://orch:{quote(PASSWORD)}@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        if self.started:
            self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
            self.started = False
        shutil.rmtree(self.dir, ignore_errors=True)


    def restart(self, down_s: float = 0.0) -> None:
        """Stop the server (every connection to it cut), wait `down_s`, and start it again
        with the same options, data kept: a database restart as a client sees it."""
        import shlex

        opts = shlex.split((self.data / "postmaster.opts").read_text())[1:]  # the options it ran with
        stop = self._run(self.bin / "pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop")
        if stop.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed: {stop.stderr.strip()}")
        time.sleep(down_s)
        start = self._run(self.bin / "pg_ctl", "-D", self.data, "-l", self.dir / "server.log",
                          "-o", shlex.join(opts[2:] if opts[:1] == ["-D"] else opts),
                          "-w", "-t", "60", "start")
        if start.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {start.stderr.strip()}")


def _has_c_utf8() -> bool:
    return any(Path(p).exists() for p in ("/usr/lib/locale/C.utf8", "/usr/lib/locale/C.UTF-8"))


def schema_url(base: str, schema: str) -> str:
    """`base` with every connection's search_path set to `schema`."""
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def create_schema(base: str) -> tuple[str, str]:
    """A fresh, empty schema on the server at `base`: (its name, the URL that uses it)."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
    return name, schema_url(base, name)


def drop_schema(base: str, name: str) -> None:
    import psycopg

    for _ in range(20):  # a server process the test started may still be closing its connections
        try:
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute("SET lock_timeout = '5s'")
                conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            return
        except psycopg.errors.LockNotAvailable:
            time.sleep(0.5)
        except psycopg.OperationalError:
            time.sleep(0.5)
