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
