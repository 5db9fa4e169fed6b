"""Uploads shared between replicas of `orch serve` on one PostgreSQL store.

A replica that receives an upload unpacks it on its own disk (`receive`) and keeps the
archive in the store with its sender (orchestrator.store.shared). Any other replica that
is asked for it (a client checking whether to send it, a job naming it, the scheduler
launching a job that runs from it) unpacks it from there on first use, checked as
safely as on receipt, and records its owners locally. A job's stored workdir names the
folder of the replica that took it (`<its home>/uploads/<sha256>`): the replica that
launches it runs it from its own folder of the same upload (`relocate`).

A SQLite store has one server, so it keeps no archives.
"""

from __future__ import annotations

import io
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Optional

from orchestrator.service.upload import owners
from orchestrator.service.upload.limits import DIGEST_PATTERN, MAX_FILES
from orchestrator.service.upload.receive import Receiver, has, touch, uploads_root
from orchestrator.service.upload.unpacking import unpack

log = logging.getLogger("orch.serve")


def shared(settings) -> bool:
    """Whether uploads are kept for other replicas: the store is a database they share."""
    from orchestrator.store import database_url

    return database_url(settings) is not None


def held_everywhere(settings, user: str):
    """Where replicas share a store: a function of an upload's digest giving what `user`'s
    other uploads hold on every replica (the quota is the user's, not each replica's);
    else None."""
    if not shared(settings):
        return None
    return lambda besides: _with_store(settings, lambda s: s.uploads_held(user, besides))


def keep(settings, digest: str, received: Receiver, user: str) -> None:
    """Keep a received upload (its archive, read only here) for every replica."""
    if shared(settings):
        archive = received.archive()
        _with_store(settings, lambda s: s.keep_upload(digest, archive, received.unpacked, user))


def fetch(home: Path, store, digest: str) -> bool:
    """Unpack the store's copy of an upload into HOME/uploads/<digest> (unless it is there
    already, as another user's), and record here every user who sent it; False when the
    store has none."""
    root = uploads_root(home)
    got = store.upload_archive(digest)
    if got is None:
        return False
    archive, size, names = got
    if not (root / digest).is_dir():
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        unpacking = root / f".unpacking-{uuid.uuid4().hex}"
        unpack(io.BytesIO(archive), unpacking, max(2 * size, 1 << 20), MAX_FILES)
        os.utime(unpacking)
        try:
            os.rename(unpacking, root / digest)
        except OSError:  # unpacked meanwhile by another request: theirs is as good
            shutil.rmtree(unpacking, ignore_errors=True)
        log.info("unpacked upload %s... from the store (sent to another replica)", digest[:16])
    owners.adopt(root, digest, size, names)
    return (root / digest).is_dir()


def _with_store(settings, do):
    from orchestrator.store import open_store

    store = open_store(settings)
    try:
        return do(store)
    finally:
        store.close()


def available(settings, digest: str, user: str, admin: bool = False) -> bool:
    """Whether `user` (or an admin) need not send the upload: here, or in the store."""
    if has(settings.home, digest, user, admin):
        return True
    if not shared(settings):
        return False
    return bool(_with_store(settings, lambda s: s.upload_owned(digest, None if admin else user)))


def ensure(settings, digest: str, user: Optional[str], admin: bool = False) -> None:
    """Have the upload on this replica's disk when `user` (None: whoever sent it, for the
    scheduler) may use it and the store has it; the caller then reads it as usual
    (`receive.folder`), which says so when it is not there."""
    if (has(settings.home, digest, user or "", admin or user is None)
            and touch(uploads_root(settings.home) / digest)) or not shared(settings):
        return

    def get(store) -> None:
        if user is None or admin or store.upload_owned(digest, user):
            fetch(settings.home, store, digest)

    _with_store(settings, get)


def relocate(settings, workdir: object, digest: Optional[str], owner: Optional[str]) -> object:
    """A stored workdir that is an upload as this replica's own folder of it, unpacked from
    the store if need be; any other workdir as it is. `digest`: the upload the job was sent
    with (checked as the sender's when it was taken). Without it, an `uploads/<sha256>` at
    the path's end (a schedule's run: the stored job file names the folder of the replica
    that took it) is moved only where `owner` sent that upload: a path is the job file's
    own text, and must not reach another user's upload."""
    if not isinstance(workdir, str):
        return workdir
    user: Optional[str] = None  # the upload the job was sent with: whoever sent it
    if digest is None:
        path = Path(os.path.normpath(workdir))
        if path.parent.name != "uploads" or not re.fullmatch(DIGEST_PATTERN, path.name):
            return workdir
        digest, user = path.name, owner or ""
    mine = uploads_root(settings.home) / digest
    if Path(workdir) == mine:
        return workdir
    ensure(settings, digest, user)
    return str(mine) if has(settings.home, digest, user or "", admin=user is None) else workdir


def owners_upload(settings, workdir: object, owner: Optional[str]) -> bool:
    """Whether `workdir` is this replica's folder of an upload `owner` sent: a schedule's
    run names it in its stored job file, checked as an upload when it was registered (a
    path of the server's own otherwise, which a client's job may not name)."""
    if not isinstance(workdir, str) or not owner:
        return False
    path = Path(os.path.normpath(workdir))
    return (path.parent == uploads_root(settings.home) and bool(re.fullmatch(DIGEST_PATTERN, path.name))
            and has(settings.home, path.name, owner, admin=False))
