"""The on-prem Ray cluster: the Ray Jobs provider pointed at ORCH_RAY_ADDRESS.

Same code as local-only mode; the differences are where the cluster is, whose token it
takes, and that orch's runner travels with the job (py_modules, under its shipped name)
instead of being assumed installed at the same version on every node.
"""

from __future__ import annotations

import atexit
import functools
import os
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

from orchestrator.base.errors import BackendError
from orchestrator.base.targets import ONPREM
from providers.ray_cluster import ClusterSnapshot, get_json, snapshot
from providers.ray_jobs import RayJobsProvider
from providers.runner_package import NAME, link_in, module

if TYPE_CHECKING:
    from orchestrator.settings import Settings

HINT = ("check ORCH_RAY_ADDRESS (the dashboard's http://host:8265) and that the Ray head "
        "runs; `orch cluster status` tests the connection")


def token_for(token_file: Optional[Path]) -> Optional[str]:
    """The cluster's Ray auth token: the configured file, RAY_AUTH_TOKEN, or Ray's default file."""
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as e:
            raise BackendError(f"cannot read the Ray token file {token_file}: {e.strerror}",
                               "set ORCH_RAY_TOKEN_FILE to a readable file") from None
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    default = Path.home() / ".ray" / "auth_token"
    return default.read_text().strip() if default.exists() else None


class OnPremProvider(RayJobsProvider):
    """The cluster at `address` (its dashboard), with the token of `token_file` or Ray's."""

    def __init__(self, address: str, token_file: Optional[Path] = None):
        token = token_for(token_file)
        super().__init__(ONPREM, address, {"Authorization": f"Bearer {token}"} if token else {},
                         hint=HINT)

    @classmethod
    def default_storage(cls, settings: Settings) -> Optional[str]:
        """`onprem_checkpoint_storage`, shared by the nodes; never ORCH_HOME: a path on the
        user's machine means nothing to the cluster."""
        return settings.onprem_checkpoint_storage

    @classmethod
    def module_command(cls, name: str) -> str:
        """The runner's module under the cluster Ray's own Python, not the node's first python3."""
        from providers.ray_python import runner_command

        return runner_command(module(name))

    def prepare(self) -> None:
        # A plain HTTP probe with a timeout first: the Jobs client can hang on a dead host.
        get_json(self.address, "/api/version", self.headers, timeout=5.0, hint=HINT)
        super().prepare()

    def extra_runtime_env(self) -> dict:
        """orch's runner goes with the job, so every node runs the submitter's version of it,
        under its shipped name (a folder of this process's holds it so named)."""
        return {"py_modules": [str(_shipped_runner() / NAME)]}

    def with_secrets(self, entrypoint: str) -> str:
        """The secret step under the cluster Ray's own Python, found as for the runner."""
        from providers.ray_python import find_python

        script = f'{find_python()}\nexec "$orch_py" -m {module("secret_env")} -- {entrypoint}'
        return f"bash -c {shlex.quote(script)}"

    def snapshot(self) -> ClusterSnapshot:
        return snapshot(self.address, self.headers)


@functools.cache
def _runner_parent() -> Path:
    """A private folder of this process's (0700, removed at its exit)."""
    path = Path(tempfile.mkdtemp(prefix="orch-runner-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _shipped_runner() -> Path:
    """A folder holding the runner under its shipped name, for Ray to pack: py_modules names
    a package after its folder. Made again should something have removed it."""
    return link_in(_runner_parent())


def read_cluster(address: str,
                 token_file: Optional[Path] = None) -> Union[ClusterSnapshot, BackendError]:
    """The cluster as it is now, or why it could not be read; never raises, so a plan can
    go on without it (placement says the cluster is unreachable)."""
    try:
        return OnPremProvider(address, token_file).snapshot()
    except BackendError as e:
        return e
    except (KeyError, TypeError, AttributeError, ValueError) as e:  # a dashboard of another shape
        return BackendError(f"Ray at {address} answered in a shape orch does not know "
                            f"({type(e).__name__}: {e})", HINT)
