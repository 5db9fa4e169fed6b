"""Where Ray Train keeps a run's checkpoints: RunConfig's storage arguments for a path or S3."""

from __future__ import annotations

import os
from typing import Optional
from urllib.parse import urlparse


def storage_args(storage_path: Optional[str], endpoint_url: Optional[str] = None) -> dict:
    """`storage_path` (and `storage_filesystem`) for RunConfig.

    An s3:// path on an S3-compatible endpoint (MinIO, moto) needs a filesystem object that
    knows the endpoint; Ray then wants the path without its scheme (s3:// plus a filesystem
    fails inside fit()). Plain s3:// on AWS and local paths go to Ray as they are.
    Credentials are never passed here: pyarrow reads them from the AWS chain on each node.
    """
    if not storage_path or not storage_path.startswith("s3://") or not endpoint_url:
        return {"storage_path": storage_path}
    import pyarrow.fs

    url = urlparse(endpoint_url if "://" in endpoint_url else "https://" + endpoint_url)
    # The region only signs requests for MinIO-like endpoints; any value they accept works.
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    fs = pyarrow.fs.S3FileSystem(endpoint_override=url.netloc, scheme=url.scheme or "https",
                                 region=region)
    return {"storage_path": storage_path[len("s3://"):].rstrip("/"), "storage_filesystem": fs}


def display_path(path: Optional[str], args: dict) -> Optional[str]:
    """A checkpoint path as the user wrote the storage: with s3:// when a filesystem hid it."""
    if path and "storage_filesystem" in args and not path.startswith("s3://"):
        return "s3://" + path.lstrip("/")
    return path


def prune_checkpoints(checkpoint, keep: int) -> list[str]:
    """Delete the run's checkpoints older than its newest `keep`; return their names.

    Ray Train keeps `num_to_keep` of the checkpoints it registered, newest first (orch sets no
    score). A job cancelled while a checkpoint was on its way leaves one Ray never registered,
    and a later job resuming the run does not know it: it stays in the bucket for good. The
    runner calls this after a run that ended well, so the folder holds what the job file said.
    `checkpoint` is a ray.train.Checkpoint (its filesystem and path); the one the result names
    is always kept. Names are `checkpoint_<timestamp>`, so their order is their age.
    """
    import posixpath

    import pyarrow.fs

    fs, path = checkpoint.filesystem, checkpoint.path.rstrip("/")
    run_dir = posixpath.dirname(path)
    found = fs.get_file_info(pyarrow.fs.FileSelector(run_dir))
    names = sorted(i.base_name for i in found
                   if i.type == pyarrow.fs.FileType.Directory
                   and i.base_name.startswith("checkpoint_"))
    stale = [n for n in names[:max(len(names) - keep, 0)]
             if posixpath.join(run_dir, n) != path]
    for name in stale:
        fs.delete_dir(posixpath.join(run_dir, name))
    return stale
