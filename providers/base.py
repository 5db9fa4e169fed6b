"""The one interface every place a job can run implements: `Backend`, with its contract
in each method's docstring, and the optional capabilities a backend adds as mixins.

A backend answers two kinds of question. What a job's launch looks like there (its
runner's Python, its default checkpoint storage, ...) is known without reaching the
backend: class attributes and classmethods, so `orch plan` can show a launch and a test
can build one with no cluster. What happens to a job there goes through an instance,
built from the settings by `providers.registry`."""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from orchestrator.base.redact import looks_secret

if TYPE_CHECKING:
    from orchestrator.records.placement import PlacedOffer, Placement
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec
    from providers.ray_cluster import ClusterSnapshot


@dataclass(frozen=True)
class JobTags:
    """What the cluster keeps with a job (Ray's job metadata), so that any orch can estimate
    the queue from it (`providers.ray_cluster` reads it back) and find a run's artifacts."""

    orch_job: str
    name: str = "job"
    cpus: float = 0.0
    gpus: float = 0.0
    nodes: int = 1
    est_hours: Optional[float] = None
    storage_path: Optional[str] = None  # where the run keeps its checkpoints or folder
    run_name: Optional[str] = None

    def as_strings(self) -> dict[str, str]:
        """As Ray keeps job metadata: strings, the unset ones left out."""
        return {k: str(v) for k, v in vars(self).items() if v is not None}


@dataclass(frozen=True)
class Launch:
    """What to run on the target, independent of where that is."""

    job_id: str
    entrypoint: str  # a shell command line, run on the target
    env: dict[str, str] = field(default_factory=dict)
    # Passed to the job like `env`, but secret: never logged, shown or kept by orch; a
    # backend that can keep them apart (SkyPilot) is told they are secrets, and Ray, which
    # logs and shows a runtime env, gets them in a file instead (jobs/secret_env.py).
    # Credential-like names in `env` are treated the same (split_env).
    secrets: dict[str, str] = field(default_factory=dict)
    workdir: Optional[str] = None
    # Paths in the workdir never sent with it ('/job.yaml': the job file, which may hold
    # secret values inline), as gitignore patterns from its top.
    excludes: tuple[str, ...] = ()
    tags: JobTags = field(default_factory=lambda: JobTags(orch_job=""))
    # The backend's name for this launch of the job: its id, or `<id>-r<n>` when a
    # preempted job is launched again (a backend never launches one id twice).
    submission_id: Optional[str] = None
    # For a cloud VM: what SkyPilot provisions. `offers` are the chosen offer first, then
    # the next-best in cost order, each a dict as `orch plan --json` shows alternatives.
    setup: Optional[str] = None
    file_mounts: dict[str, Any] = field(default_factory=dict)
    offers: tuple[PlacedOffer, ...] = ()
    num_nodes: int = 1
    disk_size: Optional[int] = None
    vm: dict[str, Any] = field(default_factory=dict)  # the job file's SkyPilot VM keys (image_id, ports, ...)
    task_keys: dict[str, Any] = field(default_factory=dict)  # its SkyPilot task keys (config, volumes, ...)
    owner: Optional[str] = None  # who submitted it (a token's name): whose instance runs it

    def split_env(self) -> tuple[dict, dict]:
        """(public, secret): `secrets` and every credential-like `env` name on the secret
        side, the rest public. A backend that logs or shows its job environment (Ray) is
        given only the public part."""
        return split_env(self.env, self.secrets)


def split_env(env: dict, secrets: dict) -> tuple[dict, dict]:
    public = {k: v for k, v in env.items() if not looks_secret(k) and k not in secrets}
    hidden = {**{k: v for k, v in env.items() if looks_secret(k)}, **secrets}
    return public, hidden


@dataclass(frozen=True)
class BackendState:
    status: str  # one of orch's statuses: PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED
    message: Optional[str] = None
    info: Optional[dict] = None  # facts to keep with the job (a cloud job's cost ledger)
    exit_code: Optional[int] = None  # its entrypoint's, where the backend says (Ray does)
    # The backend never had the job or no longer knows it (FAILED): the service reads an
    # unlaunched job's record by it (service/following.recover_launch).
    unknown: bool = False


class Backend(abc.ABC):
    """A place jobs run, known by orch's job id: the service holds no other handle on it.

    Every call may be repeated safely (the service retries them and bounds their time),
    and any failure to reach the backend is a BackendError naming what to do."""

    name: str  # the target it serves: "local", "onprem", "cloud"
    address: str  # where it is, as the job's record keeps it ("" before a local Ray starts)

    # How long after a job's record the backend may still have no trace of a launch that
    # did happen: a Ray submit is there when it returns, a cloud launch request is not.
    launch_grace_s: ClassVar[float] = 0.0
    # Whether the target clones a job's `workdir: {url, ref}` itself (SkyPilot on a cloud
    # VM); otherwise orch checks the commit out on this machine and sends that folder.
    clones_git_workdir: ClassVar[bool] = False
    # Whether a `run:` command is started once however many nodes the job has (a Ray
    # cluster's job driver), so orch starts one process a node itself (jobs/per_node.py);
    # SkyPilot runs it on every node of a cloud job.
    runs_once: ClassVar[bool] = True

    @classmethod
    def default_storage(cls, settings: Settings) -> Optional[str]:
        """Where a `train:` job keeps its checkpoints when its job file does not say; None:
        Ray Train's default folder on the node that runs it."""
        return None

    @classmethod
    def runner_command(cls) -> str:
        """The shell line that starts orch's runner there (jobs/runner.py, under its shipped
        name: providers/runner_package.py)."""
        return cls.module_command("runner")

    @classmethod
    def module_command(cls, name: str) -> str:
        """The shell line that starts the runner package's module `name` there: here under
        the first `python3` on the machine's PATH."""
        from providers.runner_package import module

        return f"python3 -m {module(name)}"

    @classmethod
    def train_command(cls, num_nodes: int) -> str:
        """The shell line that runs a `train:` job's runner on `num_nodes` nodes: here the
        runner alone, as a Ray cluster already spans its nodes."""
        return cls.runner_command()

    @classmethod
    def shell_prelude(cls) -> str:
        """Shell lines run before the job's own (its setup: and run:): none here."""
        return ""

    @classmethod
    def adapt_launch(cls, launch: Launch, spec: JobSpec, decision: Optional[Placement]) -> Launch:
        """`launch` with what this backend needs beyond the command, from the job file and
        its placement `decision`: nothing here."""
        return launch

    @abc.abstractmethod
    def prepare(self) -> None:
        """Make the backend ready to accept a job: may start a local Ray and block for
        seconds; raises BackendError when it cannot be reached or started."""

    @abc.abstractmethod
    def submit(self, launch: Launch) -> str:
        """Start the job and return the backend's id for it (orch's job id). Submitting
        the same job_id twice never starts it twice: a job the backend already has, ended
        or not, is left as it is and its id returned. Raises BackendError when the backend
        refuses the job or cannot be reached."""

    @abc.abstractmethod
    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        """The job's state as the backend sees it; `info` is what orch kept from earlier
        calls (and from `HasLaunchInfo`). A job the backend never had or no longer knows
        is FAILED with `unknown` set (which the service reads as never launched), unless a launch of it may still be on its way (then PENDING, or FAILED
        with the launch's error once it failed). Raises BackendError when the backend
        cannot be reached."""

    @abc.abstractmethod
    def logs(self, backend_id: str) -> str:
        """Everything the job printed so far, ended or not. Raises BackendError when the
        backend cannot give them (Ray: also for a job it does not know)."""

    @abc.abstractmethod
    def cancel(self, backend_id: str) -> None:
        """Ask the backend to stop the job and return without waiting for it to end; a job
        that already ended is left as it is, without an error. Raises BackendError when the
        backend cannot be reached or does not know the job (Ray; SkyPilot only says so)."""

    def gone(self) -> Optional[str]:
        """Why the backend itself no longer exists, taking every job on it along (a local
        Ray that stopped), as a message for their records; None while it exists, which a
        remote backend always does (one that does not answer raises BackendError instead)."""
        return None


class HasCapacity(abc.ABC):
    """A target with a fixed size (a Ray cluster), whose queue `orch serve` holds until a
    job fits. A backend without it (the cloud) rents what each job needs."""

    @abc.abstractmethod
    def capacity(self) -> ClusterSnapshot:
        """What the target holds and runs now, read in seconds; raises BackendError when
        it cannot be read."""


class HasLaunchInfo(abc.ABC):
    """A backend that learns at submit what it needs later to follow the job (a cloud
    launch request's id), which orch keeps in the job's record."""

    @abc.abstractmethod
    def launch_info(self, backend_id: str) -> dict:
        """Facts about this process's submit of the job, given to `state` as `info`; {}
        when this process did not submit it."""


class KeepsLogs(abc.ABC):
    """A backend that leaves its jobs' logs on this machine, readable after it is gone."""

    @abc.abstractmethod
    def saved_logs(self, backend_id: str) -> str:
        """The job's log from the files the backend left; "" when there is none. Reads
        files only, so it works when the backend is gone or does not answer."""


class ShipsSecrets(abc.ABC):
    """A backend that ships a job's secret values in something its target keeps after the
    job (a Ray working_dir package in the cluster's GCS)."""

    @abc.abstractmethod
    def forget_secrets(self, backend_id: str) -> None:
        """Once the job has ended: remove what was shipped for its secret values from the
        target. Never raises (the backend may be gone); does nothing where nothing is left."""
