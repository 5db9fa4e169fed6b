"""git and a workdir's files as hostile input: the fingerprint's git look at a user's own
repository starts no program its config names; the content hash opens no FIFO, device or
link target and reads a bounded amount; a git URL from a server's client names an allowed
scheme and host, decided before git runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.repos import committed_repo, git

_git = git


# What a repository's own config can make git run: key, value template, .gitattributes.
HOSTILE = {
    "fsmonitor": ("core.fsmonitor", "", None),
    "diff.external": ("diff.external", "", None),
    "textconv": ("diff.evil.textconv", "", "*.txt diff=evil\n"),
    "clean filter": ("filter.evil.clean", "exec cat\n", "*.txt filter=evil\n"),
}


@pytest.mark.parametrize("how", sorted(HOSTILE))
def test_the_fingerprint_of_a_local_repository_runs_nothing_its_config_names(tmp_path, how):
    from orchestrator.service.fingerprint import code_identity

    key, tail, attributes = HOSTILE[how]
    repo, marker, hook = tmp_path / "repo", tmp_path / "ran", tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch '{marker}'\n{tail}")
    hook.chmod(0o755)
    committed_repo(repo, {"a.txt": "v1\n"})
    _git(repo, "config", key, str(hook))  # after the commit: only orch's git may run it
    if attributes:
        (repo / ".gitattributes").write_text(attributes)
    (repo / "a.txt").write_text("v2, changed\n")
    identity, dirty = code_identity(repo)
    assert not marker.exists(), f"git ran the repository's {key}"
    assert identity.startswith("git:") and "+" in identity and dirty  # git did look


def test_a_server_fingerprints_a_clients_folder_by_its_content_without_git(tmp_path):
    """`orch serve`'s plans, submits and cron slots (Orch.prepared under its settings)."""
    from orchestrator.service.fingerprint import fingerprint
    from orchestrator.service.orch import Orch
    from orchestrator.service.placing import prepared
    from orchestrator.settings import Settings
    from orchestrator.spec import load_spec_text

    repo, marker = tmp_path / "repo", tmp_path / "ran"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q",
         "--allow-empty", "-m", "v1")
    _git(repo, "config", "core.fsmonitor", f"touch '{marker}'; false")
    (repo / "train.py").write_text("print(1)\n")
    settings = Settings(home=tmp_path / "home", mode="local")
    settings._serves_clients = True  # as cli/serve.py marks them
    spec = load_spec_text(f"name: h\nrun: python train.py\nworkdir: {repo}\n", "<job>")
    fp, dirty = prepared(Orch(settings).core, spec)
    assert not marker.exists() and not dirty
    assert fp == fingerprint(spec, content_only=True)[0] != fingerprint(spec)[0]
    assert not marker.exists()  # nor did the hardened look of a user's own orch


def test_the_content_hash_opens_no_fifo_device_or_link_and_reads_a_bounded_amount(tmp_path):
    from orchestrator.service.fingerprint import content_hash

    work = tmp_path / "w"
    work.mkdir()
    (work / "a-zero").symlink_to("/dev/zero")  # followed, it never ends
    os.mkfifo(work / "b-fifo")  # opened, it blocks until a writer comes
    os.mkfifo(tmp_path / "far-fifo")
    (work / "c-link").symlink_to(tmp_path / "far-fifo")
    (work / "d.py").write_text("print(1)\n")
    # In a child with its memory capped and a deadline: a hash that reads /dev/zero or
    # waits on a FIFO fails there, not in this process.
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
            "from pathlib import Path; from orchestrator.service.fingerprint import content_hash; "
            "print(content_hash(Path(sys.argv[1])))")
    start = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(work)], capture_output=True,
                              text=True, timeout=30, cwd=str(ROOT), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise AssertionError("content_hash hung on a FIFO") from None
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < 20
    first = proc.stdout.strip()
    assert first == content_hash(work)
    (work / "c-link").unlink()  # a link counts by its target's text
    (work / "c-link").symlink_to(tmp_path / "elsewhere")
    assert content_hash(work) != first

    # Past the bound on bytes read, a file counts by its size and mtime only.
    big = work / "e.bin"
    big.write_bytes(b"a" * 4096)
    st = big.stat()
    bounded, full = content_hash(work, read_total=1024), content_hash(work)
    big.write_bytes(b"b" * 4096)
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_hash(work, read_total=1024) == bounded
    assert content_hash(work) != full


def _server(schemes=("https",), hosts=("github.com", "git.example.com:8443", "[::1]:9000")):
    from orchestrator.service.git_workdir import Reach

    return Reach(frozenset(schemes), tuple(hosts), 20.0)


@pytest.mark.parametrize("url, schemes, hosts, refused", [
    ("https://github.com/o/r.git", None, None, None),
    ("https://GitHub.COM/o/r.git", None, None, None),  # host names in any case
    ("https://github.com./o/r.git", None, None, None),
    ("https://github.com:443/o/r.git", None, None, None),  # the scheme's own port
    ("https://github.com:8443/o/r.git", None, None, "not one this server's git may reach"),
    ("https://git.example.com:8443/r.git", None, None, None),
    ("https://GIT.example.com:8443/r.git", None, None, None),
    ("https://git.example.com/r.git", None, None, "not one this server's git may reach"),
    ("https://[::1]:9000/r.git", None, None, None),
    ("https://[::1]:9001/r.git", None, None, "not one"),
    ("https://github.com:99999/r.git", None, None, "not a URL git can read"),
    ("https://github.com@127.0.0.1/r.git", None, None, "host 127.0.0.1 is not one"),
    ("https://127.0.0.1:8443/r.git", None, None, "not one"),
    ("http://github.com/o/r.git", None, None, "http:// is not allowed here"),
    ("git://github.com/o/r.git", None, None, "git:// is not allowed here"),
    ("ssh://git@github.com/o/r.git", None, None, "ssh:// is not allowed here"),
    ("ssh://git@github.com/o/r.git", ("https", "ssh"), None, None),
    ("ssh://git@github.com:2222/o/r.git", ("https", "ssh"), None, "not one"),
    ("git@github.com:o/r.git", None, None, "ssh:// is not allowed here"),  # scp-like is ssh
    ("git@github.com:o/r.git", ("ssh",), None, None),
    ("github.com:o/r.git", ("ssh",), None, None),
    ("git@evil.example:o/r.git", ("ssh",), None, "host evil.example is not one"),
    ("ssh://-oProxyCommand=touch%20x/r", ("ssh",), ("*",), "names no host"),
    ("file:///srv/git/secret.git", ("https", "file"), ("*",), "file:// URL"),
    ("FILE:///srv/git/secret.git", ("https", "file"), ("*",), "file:// URL"),
    ("/srv/git/secret.git", None, ("*",), "a path on the server"),
    ("./repo", None, ("*",), "a path on the server"),
    ("../repo", ("ssh",), ("*",), "a path on the server"),
    ("repo", None, ("*",), "a path on the server"),
    ("ext::sh", ("ext", "https"), ("*",), "runs a program"),
    ("fd::3", ("https",), ("*",), "runs a program"),
    ("https://any.example/r.git", None, ("*",), None),
    ("https://any.example/r\\@github.com", None, ("*",), "backslashes"),
])
def test_a_clients_git_url_is_checked_by_scheme_and_host(url, schemes, hosts, refused):
    from orchestrator.service.git_workdir import NO_LIMITS, url_problem

    where = _server(*([schemes] if schemes else []), **({"hosts": hosts} if hosts else {}))
    problem = url_problem(url, where)
    if refused is None:
        assert problem is None, problem
    else:
        assert problem is not None and refused in problem, problem
    assert url_problem(url, NO_LIMITS) is None  # a user's own orch: any URL, as before


def test_a_refused_url_says_to_use_a_remote_url_or_an_upload_and_git_is_configured_for_it():
    from orchestrator.base.errors import InputError
    from orchestrator.service.git_workdir import check_url

    with pytest.raises(InputError) as info:
        check_url("/srv/git/secret.git", _server())
    assert "remote URL" in (info.value.hint or "") and "send the workdir" in (info.value.hint or "")
    config = _server(("https", "file")).config
    assert "protocol.allow=never" in config and "protocol.https.allow=always" in config
    assert "protocol.file.allow=never" in config and "protocol.file.allow=always" not in config
    assert "http.followRedirects=false" in config
