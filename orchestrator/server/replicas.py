"""Each `orch serve` replica saying it is alive, in the store every replica reads.

A thread of its own writes the replica's row (store/shared.py `replicas`) every LOOK_S,
whatever its scheduler is doing (a pass that launches a job may take minutes): a launcher
is dead once its row is older than REPLICA_STALE_S. Only on another host is the row
asked; on this one the process itself is (processes.alive, which is exact). A replica
stopped with SIGTERM removes its row.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Optional

from orchestrator.base.errors import OrchError
from orchestrator.store.lease import LOOK_S

if TYPE_CHECKING:
    from orchestrator.store import Store

log = logging.getLogger("orch.serve")


class Heartbeat:
    def __init__(self, settings, replica: str, role: Callable[[], str], url: Optional[str] = None):
        self.settings, self.replica, self.role, self.url = settings, replica, role, url
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._store: Optional[Store] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="orch-heartbeat", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        from orchestrator.store import open_store

        store = self._store = self._store or open_store(self.settings)
        try:
            store.replica_seen(self.replica, self.role(), self.url)
        except Exception:
            self._close()  # a lost connection: a new one next beat
            raise

    def _loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            try:
                self.beat()
                failing = False
            except (OrchError, OSError) as e:
                if not failing:  # once per spell: the store being down is logged elsewhere too
                    log.warning("cannot record this replica as alive: %s", getattr(e, "message", e))
                failing = True
            self._stop.wait(LOOK_S)
        self._leave()  # here: a SQLite connection serves only the thread that opened it

    def stop(self) -> None:
        self._stop.set()
        if self._thread is None:
            self._leave()  # beats were called from this thread, if any
        else:
            self._thread.join(10)  # it leaves as it ends; one that hangs is a daemon

    def _leave(self) -> None:
        try:
            if self._store is not None:
                self._store.replica_gone(self.replica)
        except (OrchError, OSError):
            pass  # its row goes stale on its own
        self._close()

    def _close(self) -> None:
        if self._store is not None:
            try:
                self._store.close()
            except Exception:  # closing a broken connection
                pass
            self._store = None


def alive(replicas, launcher: str) -> Optional[bool]:
    """Whether a launcher on another host is a live replica by its row (`replicas`: what
    answers `replica_alive`, the service or its store); None when the store never saw it
    (an `orch submit` there, or a replica from before rows)."""
    try:
        return replicas.replica_alive(launcher)
    except OrchError:
        return None


def launcher_id() -> str:
    """This process, as a launcher that another server can tell is alive or not."""
    from orchestrator.service.processes import submitter

    me = submitter()
    return f"{me['host']}/{me['pid']}/{me['started']}"


def launcher_alive(text: str, replicas=None) -> bool:
    """Whether the launcher that claimed a job still runs: on this host its process is
    asked; on another, its replica's row in the store (server/replicas.py), when it has one."""
    import socket

    from orchestrator.service.processes import alive as process_alive

    host, _, rest = text.partition("/")
    pid, _, started = rest.partition("/")
    if replicas is not None and host != socket.gethostname():
        seen = alive(replicas, text)
        if seen is not None:
            return seen
    try:
        return process_alive({"host": host, "pid": int(pid), "started": float(started)})
    except ValueError:
        return False


def check_key(settings) -> None:
    """On a PostgreSQL store: refuse to serve with a secret key other than the one the
    store's replicas use (a log redacted by one replica must be redacted by all)."""
    from orchestrator.base.errors import InputError
    from orchestrator.base.redact import KEY_FILE, key_id, store_key
    from orchestrator.store import database_url, open_store

    if not database_url(settings):
        return
    mine = key_id(store_key(settings.home, file=settings.secret_key_file))
    store = open_store(settings)
    try:
        theirs = store.secret_key_id(mine)
    finally:
        store.close()
    if theirs != mine:
        where = settings.secret_key_file or settings.home / KEY_FILE
        raise InputError(f"this server's secret key ({where}, id {mine}) is not the one the other "
                         f"replicas of this store use (id {theirs}): each would redact secret "
                         "values in logs differently",
                         "copy the key file of a running replica here (mode 0600), or point "
                         "secret_key_file (ORCH_SECRET_KEY_FILE) at a copy of it")
