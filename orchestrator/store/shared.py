"""What replicas of `orch serve` share through the store rather than a disk of their own.

- A finished job's log, kept zlib-compressed when the job ends (a replica that did not
  see the end reads it here; its backend may have forgotten the job by then). A log over
  `LOG_KEEP_BYTES` keeps its end, saying how much of its start was left out.
- An upload's archive (the tar.gz a client sent, named by its sha256) and the users who
  sent it: a replica that has not unpacked it yet does so from here
  (orchestrator.service.upload.sharing). `used_at` is its last use by any replica.
- Each replica's last look (`replicas`): a launcher on another host is alive while its
  replica row is fresh.

Each write is one statement (the database's own transaction), outside the store's write
lock: an archive of many megabytes does not hold up other writers.
"""

from __future__ import annotations

import time
import zlib
from typing import Optional

from orchestrator.records.replica import ReplicaRow
from orchestrator.store.base import StoreBase

LOG_KEEP_BYTES = 32 << 20  # the end of a longer log is kept (its start stays in its file)
REPLICA_STALE_S = 20.0  # a replica that has not looked for this long is taken as dead


def _bytes(value) -> bytes:
    return bytes(value)  # psycopg gives bytes, sqlite3 bytes; a memoryview reads the same


class Shared(StoreBase):
    # -- finished jobs' logs ---------------------------------------------------------------

    def keep_log(self, job_id: str, text: str) -> None:
        """Keep a finished job's (redacted) log for every replica; again replaces it."""
        data = text.encode()
        if len(data) > LOG_KEEP_BYTES:
            cut = len(data) - LOG_KEEP_BYTES
            data = (f"[orch: the first {cut} bytes of this log are left out; the whole log "
                    "is in the file its record names, on the server that ended it]\n").encode() \
                + data[cut:]
        self._db.execute(
            "INSERT INTO job_logs (job_id, body, bytes, kept_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (job_id) DO UPDATE SET body = excluded.body, bytes = excluded.bytes, "
            "kept_at = excluded.kept_at", (job_id, zlib.compress(data, 6), len(data), time.time()))

    def kept_log(self, job_id: str) -> Optional[str]:
        row = self._db.execute("SELECT body FROM job_logs WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None else zlib.decompress(_bytes(row["body"])).decode(errors="replace")

    # -- uploads ---------------------------------------------------------------------------

    def keep_upload(self, digest: str, archive: bytes, size: int, owner: str) -> None:
        """Keep an upload's archive (once: the same digest is the same bytes) and `owner`
        as one who sent it; `size` is what the quota counts of it (its files' bytes and
        4 KiB for each entry)."""
        now = time.time()
        self._db.execute("INSERT INTO uploads (digest, archive, bytes, created_at, used_at) "
                         "VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO UPDATE SET used_at = "
                         "excluded.used_at", (digest, archive, size, now, now))
        self._db.execute("INSERT INTO upload_owners (digest, owner) VALUES (?, ?) "
                         "ON CONFLICT (digest, owner) DO NOTHING", (digest, owner))

    def uploads_held(self, owner: str, besides: str = "") -> int:
        """What the quota counts of every upload `owner` sent (but `besides`), whichever
        replica received it."""
        row = self._db.execute("SELECT COALESCE(SUM(u.bytes), 0) AS held FROM uploads u JOIN "
                               "upload_owners o ON o.digest = u.digest WHERE o.owner = ? "
                               "AND u.digest <> ?", (owner, besides)).fetchone()
        return int(row["held"] or 0)

    def upload_owned(self, digest: str, owner: Optional[str]) -> bool:
        """Whether the store has the upload, sent by `owner` (None: by anyone)."""
        if owner is None:
            return self._db.execute("SELECT 1 FROM uploads WHERE digest = ?",
                                    (digest,)).fetchone() is not None
        return self._db.execute("SELECT 1 FROM upload_owners WHERE digest = ? AND owner = ?",
                                (digest, owner)).fetchone() is not None

    def upload_archive(self, digest: str) -> Optional[tuple[bytes, int, list[str]]]:
        """(archive, unpacked bytes, owners) of a kept upload, marked as used now."""
        row = self._db.execute("SELECT archive, bytes FROM uploads WHERE digest = ?",
                               (digest,)).fetchone()
        if row is None:
            return None
        self.touch_upload(digest)
        owners = [r["owner"] for r in self._db.execute(
            "SELECT owner FROM upload_owners WHERE digest = ? ORDER BY owner", (digest,))]
        return _bytes(row["archive"]), int(row["bytes"]), owners

    def touch_upload(self, digest: str) -> None:
        self._db.execute(f"UPDATE uploads SET used_at = {self._db.greatest}(used_at, ?) "
                         "WHERE digest = ?", (time.time(), digest))

    def kept_uploads(self) -> dict[str, float]:
        """digest -> its last use, of every kept upload."""
        return {r["digest"]: float(r["used_at"]) for r in
                self._db.execute("SELECT digest, used_at FROM uploads")}

    def drop_upload(self, digest: str, used_at: float) -> bool:
        """Remove a kept upload unless it was used after `used_at` (read when it was judged
        unneeded); whether it went."""
        with self._write() as db:
            gone = db.execute("DELETE FROM uploads WHERE digest = ? AND used_at <= ?",
                              (digest, used_at)).rowcount
            if gone:
                db.execute("DELETE FROM upload_owners WHERE digest = ?", (digest,))
        return bool(gone)

    # -- replicas --------------------------------------------------------------------------

    def secret_key_id(self, mine: str) -> str:
        """The id of the secret key the store's replicas use (redact.key_id): the first
        replica's, recorded; compared by each that starts."""
        self._db.execute("INSERT INTO meta (key, value) VALUES ('secret_key_id', ?) "
                         "ON CONFLICT (key) DO NOTHING", (mine,))
        row = self._db.execute("SELECT value FROM meta WHERE key = 'secret_key_id'").fetchone()
        return str(row["value"])

    def replica_seen(self, replica: str, role: str, url: Optional[str] = None,
                     started_at: Optional[float] = None) -> None:
        now = time.time()
        self._db.execute(
            "INSERT INTO replicas (id, url, role, started_at, seen_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (id) DO UPDATE SET role = excluded.role, seen_at = excluded.seen_at, "
            "url = COALESCE(excluded.url, replicas.url)", (replica, url, role, started_at or now, now))

    def replica_gone(self, replica: str) -> None:
        self._db.execute("DELETE FROM replicas WHERE id = ?", (replica,))

    def replicas(self, stale_s: float = REPLICA_STALE_S) -> list[ReplicaRow]:
        """Every replica that looked within `stale_s` (the others are dropped on the way),
        the holder of the lease first."""
        now = time.time()
        self._db.execute("DELETE FROM replicas WHERE seen_at < ?", (now - 24 * 3600,))
        rows = [ReplicaRow.model_validate(dict(r))
                for r in self._db.execute("SELECT * FROM replicas ORDER BY started_at")]
        live = [r for r in rows if now - r.seen_at <= stale_s]
        return sorted(live, key=lambda r: r.role != "leading")

    def replica_alive(self, replica: str, stale_s: float = REPLICA_STALE_S) -> Optional[bool]:
        """Whether a replica looked within `stale_s`; None when the store never saw it."""
        row = self._db.execute("SELECT seen_at FROM replicas WHERE id = ?", (replica,)).fetchone()
        return None if row is None else time.time() - float(row["seen_at"]) <= stale_s
