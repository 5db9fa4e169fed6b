"""Takes a job's secret file out of the cluster's copy of its working_dir package.

The Ray Jobs client uploads a job's working_dir, secret file included (secret_env.py), as a
zip in the GCS key-value store, where every job of the cluster can list and read it
(`_internal_kv_list(b"gcs://")`) until Ray garbage-collects it, also after the job ended.
Once the driver has taken the values, it puts the package back without the file, under the
same key: the nodes that unpack it later (a job's own tasks elsewhere) still find it, and
no job finds a value in it. The driver knows its package (RAY_JOB_CONFIG_JSON_ENV_VAR, which
Ray's job supervisor sets) and its cluster (RAY_ADDRESS) and holds the cluster's token.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from typing import Mapping, Optional

CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def working_dir_uri(environ: Mapping[str, str]) -> Optional[str]:
    """The gcs:// URI of this driver's working_dir package, from its job config."""
    try:
        config = json.loads(environ.get(CONFIG_VAR) or "null")
    except ValueError:
        return None
    runtime_env = (config or {}).get("runtime_env") if isinstance(config, dict) else None
    uri = runtime_env.get("working_dir") if isinstance(runtime_env, dict) else None
    return uri if isinstance(uri, str) and uri.startswith("gcs://") else None


def without(data: bytes, name: str) -> Optional[bytes]:
    """The zip `data` without its entries called `name` (in any folder); None when it has none."""
    src = zipfile.ZipFile(io.BytesIO(data))
    entries = src.infolist()
    keep = [i for i in entries if i.filename.rstrip("/").rsplit("/", 1)[-1] != name]
    if len(keep) == len(entries):
        return None
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in keep:
            dst.writestr(info, src.read(info))
    return out.getvalue()


def scrub(name: str, environ: Mapping[str, str] = os.environ) -> Optional[str]:
    """Put this job's package back without the file `name`; None when done (or when there was
    nothing to do), else what went wrong."""
    uri, address = working_dir_uri(environ), environ.get("RAY_ADDRESS")
    if not uri or not address:
        return "this driver has no working_dir package or Ray address (not a Ray job?)"
    try:
        from ray._raylet import GcsClient

        gcs = GcsClient(address=address)
        key = uri.encode()
        data = gcs.internal_kv_get(key, None)
        clean = without(data, name) if data else None
        if clean is not None:
            gcs.internal_kv_put(key, clean, True, None)
    except Exception as e:  # noqa: BLE001  (the job runs on; the message says what is left)
        return f"{type(e).__name__}: {e}"
    return None
