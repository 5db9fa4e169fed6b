"""What a job sent to `orch serve` may ask of the server: no server path outside the admin's
serve_workdir_roots, no server environment variable the admin did not list for its user,
and no text that cannot be a file name, command or environment value.

A client's job file is written on the client's machine, so a folder or file it names is the
client's. Read on the server instead, it would be the server's: another user's saved logs
(ORCH_HOME/logs), its SSH keys as a cloud file mount, its environment as `secrets: {NAME:
null}`. So `check` refuses those before anything reads them, and its messages show only what
the client wrote: never whether a server path exists, where a symlink leads, or whether a
variable is set. The only filesystem reads are of paths already inside a root.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from orchestrator.base.errors import InputError, SpecError
from orchestrator.base.inputs import clip
from orchestrator.base.targets import LOCAL

# A source SkyPilot fetches itself (s3://, gs://, r2://, https://...): it reads a URL with a
# host as a cloud store (sky/data/data_utils.py, is_cloud_store_url), anything else as a path
# on the machine that launches the job, here the server.
_REMOTE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://[^/]")

# SkyPilot task keys that reach the launching machine's own stores, not the VM's: its
# internal map of uploaded paths, and its API server's secret store.
_SERVER_KEYS = {
    "file_mounts_mapping": "is SkyPilot's internal map of the launching machine's uploaded "
                           "files, not a key for a job file",
    "managed_secrets": "names secrets in the server's SkyPilot secret store, which a job "
                       "sent to orch serve may not use",
}

_WORKDIR_HINT = ("send the workdir as an upload (orch submit and orch plan do that for a "
                 "folder on your machine), use a git repository (workdir: {url: https://...}), "
                 "or ask the server's admin for a serve_workdir_roots entry (a shared filesystem)")


def check(spec, body, user: Optional[str], settings) -> None:
    """Refuse (InputError, HTTP 400) what a client's job may not ask of the server. `spec`:
    the job as the client sent it (before an upload replaces its workdir); `body`: the
    request (file, upload, env, secrets, idempotency_key); `user`: the caller's token name
    (None: only what every user may)."""
    check_text(spec, body)
    check_paths(spec, file=body.file, upload=body.upload is not None,
                roots=settings.serve_workdir_roots, never=[settings.home])
    check_env_secrets(spec, user, settings)
    check_local_target(spec, settings)


# -- text ----------------------------------------------------------------------------------

def text_problem(value: str) -> Optional[str]:
    """Why `value` cannot be a file name, command or environment value, or None."""
    if "\x00" in value:
        return "contains a NUL character (\\0), which no file name, command or environment " \
               "value can hold"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"contains \\u{ord(value[e.start]):04x}, half of a UTF-16 surrogate pair, which "
                "is not a character: no file name, command or environment value can hold it")
    return None


def check_text(spec, body) -> None:
    """The request's own strings, then every key and value of the job: a NUL or a lone
    surrogate is refused here, naming where it is (never the value: it may be a secret)."""
    hint = "write the character itself (UTF-8), or remove it"
    for field in ("file", "idempotency_key"):
        value = getattr(body, field, None)
        problem = value is not None and text_problem(value)
        if problem:
            raise InputError(f"{field}: {problem}", hint)
    for field in ("env", "secrets"):
        for k, v in (getattr(body, field, None) or {}).items():
            problem = text_problem(k) or text_problem(v)
            if problem:
                raise InputError(f"{field}.{_shown(k)}: {problem}", hint)
    for where, value in _strings(spec.model_dump(mode="python"), ()):
        problem = text_problem(value)
        if problem:
            raise spec.error(".".join(map(_shown, where)) or "job", problem, hint)


def _shown(key) -> str:
    """A key as a message shows it: escaped when it is not text (a response holding a lone
    surrogate cannot be encoded, and would be a 500)."""
    key = str(key)
    return clip(key, 40) if text_problem(key) else key


def _strings(value: Any, where: tuple) -> Iterable[tuple[tuple, str]]:
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str):
                yield where + (k,), k
            yield from _strings(v, where + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, where + (i,))


# -- server paths --------------------------------------------------------------------------

def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def inside(path: str, roots: Iterable, never: Iterable = ()) -> bool:
    """Whether the absolute `path` is inside one of `roots`, as written (`..` folded) and
    once every symlink is followed, and in none of `never` (the server's ORCH_HOME: its
    store, uploads and logs, should a root hold it). A path outside the roots as written is
    refused without a look at the filesystem, so the answer says nothing about what exists
    there."""
    roots = [str(r) for r in roots]
    if not os.path.isabs(path) or not roots:
        return False
    written = os.path.normpath(path)
    if not any(_under(written, os.path.normpath(r)) or _under(written, os.path.realpath(r))
               for r in roots):
        return False
    real = os.path.realpath(written)
    if any(_under(p, os.path.normpath(str(n))) or _under(p, os.path.realpath(str(n)))
           for n in never for p in (written, real)):
        return False
    return any(_under(real, os.path.realpath(r)) for r in roots)


def remote(source: str) -> bool:
    """Whether SkyPilot fetches `source` itself (a bucket or URL), not from a local path."""
    m = _REMOTE.match(source)
    return m is not None and m.group(1).lower() != "file"


def check_paths(spec, file: Optional[str], upload: bool, roots: Iterable,
                never: Iterable = ()) -> None:
    """Each server path the job names must be inside a root, and in none of `never`: its
    workdir folder (unless an upload replaces it), its local file_mounts sources, its local
    checkpoint storage. A relative workdir is read from the request's `file`, which counts
    only inside a root."""
    roots, never = list(roots), list(never)
    for key, problem in _SERVER_KEYS.items():
        if key in spec.extra_task_keys():
            raise spec.error(key, problem, "give the files as file_mounts from a bucket "
                             "(s3://...), and secret values with --secret NAME=VALUE")
    if isinstance(spec.workdir, str) and not upload:
        _check_workdir(spec, spec.workdir, file, roots, never)
    for dest, mount in spec.file_mounts.items():
        for i, source in _mount_sources(mount):
            if remote(source):
                continue
            path = os.path.abspath(os.path.expanduser(source))  # as SkyPilot reads it
            if not inside(path, roots, never):
                raise spec.error(f"file_mounts.{dest}" + ("" if i is None else ".source"),
                                 f"{clip(source)} is a path on the server, which a job sent to "
                                 "orch serve may not read",
                                 "put the files in a bucket and mount that (e.g. "
                                 f"{dest}: s3://bucket/path), send them in the job's workdir "
                                 "(an upload), or ask the server's admin for a "
                                 "serve_workdir_roots entry")
    storage = spec.checkpoint.storage
    if storage and not remote(storage) and not inside(os.path.expanduser(storage), roots, never):
        raise spec.error("checkpoint.storage", f"{clip(storage)} is a path on the server, which "
                         "a job sent to orch serve may not write",
                         "write checkpoints to object storage (checkpoint.storage: "
                         "s3://bucket/prefix), or ask the server's admin for a "
                         "serve_workdir_roots entry")


def _mount_sources(mount) -> list[tuple[Optional[int], str]]:
    """(index, source) of a file_mounts entry: a source string, or SkyPilot's storage form
    {source: a path, a URL or a list of paths, name, mode, ...}."""
    if isinstance(mount, str):
        return [(None, mount)]
    source = mount.get("source") if isinstance(mount, dict) else None
    if isinstance(source, str):
        return [(0, source)]
    if isinstance(source, list):
        return [(i, s) for i, s in enumerate(source) if isinstance(s, str)]
    return []


def _check_workdir(spec, workdir: str, file: Optional[str], roots: list, never: list) -> None:
    refused = spec.error("workdir", f"{clip(workdir)} is a folder on the server, which a job "
                         "sent to orch serve may not name", _WORKDIR_HINT)
    path = os.path.expanduser(workdir)
    if not os.path.isabs(path):
        # Read from the job file's folder, as orch reads it alone: only a file inside a root.
        if not (file and inside(file, roots, never)):
            raise refused
        path = os.path.join(os.path.dirname(os.path.realpath(file)), path)
        if inside(path, roots, never) and not os.path.isdir(path):
            # Said only inside a root. And orch (spec.workdir_path) would then look in its
            # own current folder instead, which is no root.
            raise spec.error("workdir", f"{clip(workdir)} is not a directory beside the job "
                             "file", "paths are relative to the job file's folder")
    if not inside(path, roots, never):
        raise refused
    leaving = link_leaving(path, roots, never)
    if leaving is not None:
        raise spec.error("workdir", f"{clip(workdir)} holds a link, {clip(leaving)}, that leads "
                         "outside the server's serve_workdir_roots: packed for the job, it "
                         "would carry the server's files", "replace the link with the files "
                         "it stands for, or send the folder as an upload")


# Entries looked at in a root's folder at most: past it the folder is refused (a job's
# folder on a shared filesystem holds code, not millions of files; an upload has the same cap).
MAX_WALK = 100_000


def link_leaving(folder: str, roots: Iterable, never: Iterable = ()) -> Optional[str]:
    """The first link in `folder` (a folder inside a root) that leads outside the roots or
    into `never`, as a path relative to it; None when every link stays inside. A folder is
    packed for its job with its links followed (Ray's packing reads a link's target), so a
    link to ORCH_HOME or /etc would carry the server's files to the job. Folders behind
    links are not walked (what a link leads to is checked as a whole)."""
    roots, never = list(roots), list(never)
    seen = 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            if seen > MAX_WALK:
                return f"(more than {MAX_WALK:,} entries)"
            path = os.path.join(top, name)
            if os.path.islink(path) and not inside(os.path.realpath(path), roots, never):
                return os.path.relpath(path, folder)
    return None


# -- the server's environment --------------------------------------------------------------

def env_secret_names(settings, user: Optional[str]) -> set[str]:
    """The `secrets: {NAME: null}` names the server fills from its environment for `user`."""
    lists = settings.serve_env_secrets or {}
    return set(lists.get("*", [])) | (set(lists.get(user, [])) if user else set())


def check_env_secrets(spec, user: Optional[str], settings) -> None:
    """A null secret is filled from the server's environment only when the admin lists its
    name for this user; the refusal reads the same whether or not the variable is set."""
    allowed = env_secret_names(settings, user)
    for name, value in spec.secrets.items():
        if value is None and name not in allowed:
            raise refused_secret(spec, name)


def refused_secret(spec, name: str) -> SpecError:
    return spec.error(f"secrets.{name}", "this server fills only the names its admin lists in "
                      "serve_env_secrets for you",
                      f"send the value with --secret {name}=... (orch submit reads "
                      f"--secret {name} from your shell), or ask the server's admin to list "
                      f"{name} for you in serve_env_secrets")


def check_launch(spec, owner: Optional[str], settings, target: Optional[str] = None,
                 upload: bool = False) -> None:
    """Again at launch (a queued job, a cron slot, after a restart): the names still listed
    for the job's owner, its target still allowed, and the server paths it names, as they
    are now (a folder in a root swapped for a link to ORCH_HOME since a schedule was
    registered is refused). `upload`: its workdir is an upload the server unpacked (checked
    as it was unpacked). A job with no owner was recorded on the server's own store, not
    sent by a client."""
    if owner is not None:
        check_env_secrets(spec, owner, settings)
        check_local_target(spec, settings, target)
        check_paths(spec, file=spec.source_file, upload=upload,
                    roots=settings.serve_workdir_roots, never=[settings.home])


# -- the server's own machine ---------------------------------------------------------------

_LOCAL_HINT = ("send it to a cluster or a cloud (placement: {allow: [onprem, cloud]}), or ask "
               "the server's admin to set serve_isolation = \"per-user\" (each user's jobs as an "
               "OS user of their own) or serve_local_trusted = true, which lets every "
               "client's job read the server's home and store (docs/security.md)")


def local_refused(settings) -> bool:
    """Whether this server keeps clients' jobs off its own machine (the `local` target):
    a job there would run as the server's user, who reads its store, key and every upload,
    unless the per-user isolation mode runs it as an OS user of its owner's own."""
    return not settings.serve_local_trusted and settings.serve_isolation != "per-user"


def check_local_target(spec, settings, target: Optional[str] = None) -> None:
    """A client's job may not run on the server's own machine unless its admin trusts the
    team with it (`serve_local_trusted`): refused when the server has no other target, when
    the job allows no other, or when it was placed there (`target`)."""
    if not local_refused(settings):
        return
    problem = ("runs on the server's own machine, as the server's user, which this server "
               "does not do for clients (serve_local_trusted is false)")
    if settings.effective_mode == "local":
        raise InputError(f"this server is in local-only mode: a job sent to it {problem}",
                         _LOCAL_HINT)
    if set(spec.placement.allow) <= {LOCAL} or target == LOCAL:
        raise spec.error("placement.allow", f"the local target {problem}", _LOCAL_HINT)
