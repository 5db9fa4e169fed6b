"""A job's workdir packed without Ray (providers/ray_package.py): the same entries and bytes
as Ray's own packing code makes of it, and Ray's client left to the folders orch cannot
pack the same way."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from providers.ray_package import plain_package

LEFT_OUT = ("/job.yaml", "/sub/secret.txt")  # orch's own patterns (launch_spec.left_out)


def _tree(top: Path) -> Path:
    for rel, text in {"train.py": "print(1)\n", "job.yaml": "secrets: x\n", "sub/secret.txt": "v",
                      "sub/keep.txt": "k", "sub/deep/data.csv": "a,b\n", "job.yaml.bak": "b",
                      "__pycache__/train.cpython-311.pyc": "c", "sub/__pycache__/x.pyc": "c",
                      ".git/HEAD": "ref", "venv/bin/python": "", "sub/.venv/pyvenv.cfg": "",
                      ".orch-job-abc": "abc\n"}.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(text)
    (top / "empty").mkdir()
    (top / "sub" / "empty2").mkdir()
    return top


def _entries(data: bytes) -> dict:
    import io

    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {i.filename: z.read(i.filename) for i in z.infolist()}


def _rays(top: Path, excludes, tmp: Path) -> dict:
    """What Ray's client uploads for that working_dir: its own packing code, with its
    default excludes before the job's (upload_working_dir_if_needed)."""
    from ray._private import ray_constants
    from ray._private.runtime_env.packaging import create_package

    out = tmp / "ray.zip"
    create_package(str(top), out, include_gitignore=True,
                   excludes=ray_constants.get_runtime_env_default_excludes() + list(excludes))
    return _entries(out.read_bytes())


def test_the_package_holds_what_rays_holds(tmp_path):
    top = _tree(tmp_path / "work")
    data = plain_package(top, LEFT_OUT)
    assert data is not None
    mine = _entries(data)
    assert mine == _rays(top, LEFT_OUT, tmp_path)
    assert "train.py" in mine and "sub/deep/data.csv" in mine and "empty/" in mine
    assert "job.yaml" not in mine and "sub/secret.txt" not in mine and "job.yaml.bak" in mine


@pytest.mark.parametrize("make", [
    lambda top: (top / ".gitignore").write_text("*.csv\n"),
    lambda top: (top / "sub" / ".rayignore").write_text("keep.txt\n"),
    lambda top: (top / "link.py").symlink_to(top / "train.py"),
    lambda top: (top / "sub" / "dir_link").symlink_to(top / "sub" / "deep"),
], ids=["gitignore", "rayignore", "file link", "folder link"])
def test_what_ray_would_pack_otherwise_goes_to_rays_client(tmp_path, make):
    top = _tree(tmp_path / "work")
    make(top)
    assert plain_package(top, LEFT_OUT) is None


@pytest.mark.parametrize("pattern", ["*.csv", "job.yaml", "/sub/*.txt", "/[a]"])
def test_patterns_other_than_orchs_own_paths_go_to_rays_client(tmp_path, pattern):
    assert plain_package(_tree(tmp_path / "work"), [pattern]) is None


def test_rays_own_default_excludes_changed_go_to_rays_client(tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_OVERRIDE_RUNTIME_ENV_DEFAULT_EXCLUDES", "")
    assert plain_package(_tree(tmp_path / "work"), LEFT_OUT) is None


def test_a_large_workdir_goes_to_rays_client(tmp_path, monkeypatch):
    import providers.ray_package as rp

    top = _tree(tmp_path / "work")
    monkeypatch.setattr(rp, "_PLAIN_PACKAGE_MAX", 10)  # its files hold 19 bytes
    assert plain_package(top, LEFT_OUT) is None
