"""The driver's copy-back of its working_dir package without the secret file (issue 46)."""

from __future__ import annotations

import io
import json
import zipfile

from jobs.package_scrub import CONFIG_VAR, scrub, without, working_dir_uri


def _zip(entries: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return out.getvalue()


def test_the_package_comes_back_without_the_secret_file_and_with_everything_else():
    name = ".orch-env-0123abcd"
    data = _zip({"train.py": "print(1)", name: '{"env": {"DB_PASSWORD": "pw-x"}}',
                 f"sub/{name}": "copy", "sub/.orch-env-other": "not this job's"})
    clean = without(data, name)
    assert clean is not None and b"pw-x" not in clean
    z = zipfile.ZipFile(io.BytesIO(clean))
    assert sorted(z.namelist()) == ["sub/.orch-env-other", "train.py"]
    assert z.read("train.py") == b"print(1)"
    assert without(clean, name) is None  # nothing left to take out


def test_the_package_is_found_in_the_job_config_ray_gives_the_driver():
    config = {"runtime_env": {"working_dir": "gcs://_ray_pkg_ab.zip"}, "metadata": {}}
    assert working_dir_uri({CONFIG_VAR: json.dumps(config)}) == "gcs://_ray_pkg_ab.zip"
    for bad in ("", "{", "[]", json.dumps({"runtime_env": {"working_dir": "s3://b/x.zip"}})):
        assert working_dir_uri({CONFIG_VAR: bad}) is None
    assert "no working_dir package" in (scrub(".orch-env-x", {}) or "")
