"""The cloud through SkyPilot: the task orch chose, launched as a managed job, followed, priced.

orch decides what to rent (cloud, region, GPU, spot) and hands SkyPilot exactly that,
with the next-best offers as ordered fallbacks. SkyPilot provisions, recovers spot
preemptions (job_recovery) and runs the same runner as on-prem. The SDK is reached only
through `SkySDK`, which tests replace with a fake that replays managed-job states."""

from __future__ import annotations

import dataclasses
import io
import os
import re
import time
from typing import TYPE_CHECKING, Optional

from orchestrator.base.errors import BackendError
from orchestrator.base.preemption import PREEMPTED_EXIT
from orchestrator.base.targets import CLOUD
from orchestrator.decision.cloud_bill import update_ledger
from providers.base import Backend, BackendState, HasLaunchInfo, Launch
from providers.runner_package import NAME, SOURCE, module

if TYPE_CHECKING:
    from orchestrator.records.placement import PlacedOffer, Placement
    from orchestrator.settings import Settings
    from orchestrator.spec import JobSpec

# SkyPilot's managed-job states to orch's; RECOVERING is still a running job to the user.
_STATES = {"PENDING": "PENDING", "SUBMITTED": "PENDING", "STARTING": "PENDING",
           "RUNNING": "RUNNING", "RECOVERING": "RUNNING", "WINDING_DOWN": "RUNNING",
           "CANCELLING": "RUNNING", "SUCCEEDED": "SUCCEEDED", "CANCELLED": "CANCELLED",
           "FAILED": "FAILED", "FAILED_SETUP": "FAILED", "FAILED_PRECHECKS": "FAILED",
           "FAILED_NO_RESOURCE": "FAILED", "FAILED_CONTROLLER": "FAILED"}
_WHY = {
    "RECOVERING": "the VM was preempted or lost; SkyPilot is recovering it",
    "FAILED_SETUP": "the job's setup commands failed on the VM (see `orch logs`)",
    "FAILED_PRECHECKS": "SkyPilot refused the task before launch",
    "FAILED_NO_RESOURCE": "no capacity for any offer orch listed; try later, allow spot or "
                          "more clouds (ORCH_CLOUDS), or raise the budget",
    "FAILED_CONTROLLER": "SkyPilot's jobs controller failed; `sky jobs logs --controller` tells why",
}
RUNNER_DIR = "~/.orch-runner"  # where orch's runner package lands on the VM
FALLBACKS = 4  # offers handed to SkyPilot after the chosen one
_CATALOG = re.compile(r"catalogs/(v\d+)/([\w./-]+\.csv)")
_HOST = re.compile(r"host='([^']+)'")
_SERVER = re.compile(r"API server at (\S+?)\.?(?:\s|$)")


def sky_env() -> None:
    os.environ.setdefault("SKYPILOT_DISABLE_USAGE_COLLECTION", "1")


def controller_not_up(e: BaseException) -> Optional[str]:
    """SkyPilot's jobs controller state when `e` says it is not up: "none" when no controller
    exists (none was ever launched through this API server, or the first launch is still
    provisioning it: SkyPilot then has no managed jobs at all), else its status (STOPPED:
    it stopped itself once no job was left in progress). None: `e` says something else."""
    if type(e).__name__ != "ClusterNotUpError":  # sky is imported whenever it raised this
        return None
    from sky import exceptions

    if not isinstance(e, exceptions.ClusterNotUpError):
        return None
    status = getattr(e, "cluster_status", None)
    return "none" if status is None else str(getattr(status, "value", status))


def refusal(e: BaseException) -> tuple[str, str]:
    """(what, hint) for an exception from a SkyPilot call, without its traceback: an API
    server that does not answer, and a catalog SkyPilot could not download (its first use
    of a cloud, with no network), are named."""
    text = str(e)
    if type(e).__name__ == "ApiServerConnectionError":  # SkyPilot's health check got no answer
        server = _SERVER.search(text)
        return (f"cannot reach SkyPilot's API server at "
                f"{server.group(1) if server else 'its endpoint'}",
                "check SKYPILOT_API_SERVER_ENDPOINT (or api_server.endpoint in ~/.sky/config.yaml) "
                "and that the server is running: `sky api info`")
    found = _CATALOG.search(text)
    if found:
        host = _HOST.search(text)
        where = host.group(1) if host else "the network"
        return (f"SkyPilot could not download its catalog {found.group(2)} from {where} "
                f"({type(e).__name__}: no network?)",
                f"SkyPilot fetches a cloud's catalog on first use: let this machine reach {where}, "
                f"or copy ~/.sky/catalogs/{found.group(1)}/ from a machine that has it")
    first = text.strip().splitlines()[0] if text.strip() else ""
    return (f"{type(e).__name__}: {first}".rstrip(": "),
            "`sky check` shows which clouds are enabled; `sky api info` the API server")


CHECK_TIMEOUT_S = 10.0  # a cloud's own check may ask its API (Lambda's does), which may hang


def enabled_clouds(clouds: list[str], timeout_s: float = CHECK_TIMEOUT_S) -> tuple[list[str], dict[str, str]]:
    """Which configured clouds have credentials here, checked locally as `sky check` does,
    all at once, each for at most `timeout_s` seconds (a check that has not answered by
    then counts as not enabled, and says so)."""
    import concurrent.futures

    sky_env()
    from sky import clouds as sky_clouds
    from sky.utils import registry

    def check(cloud) -> tuple[bool, Optional[str]]:
        try:
            good, reason = cloud.check_credentials(sky_clouds.CloudCapability.COMPUTE)
        except Exception as e:  # a cloud's own check failing is "not enabled", not a crash
            return False, f"{type(e).__name__}: {e}"
        return bool(good), None if reason is None else str(reason)

    why: dict[str, str] = {}
    found = {}
    for name in clouds:
        cloud = registry.CLOUD_REGISTRY.from_str(name)
        if cloud is None:
            why[name] = "not a SkyPilot cloud"
        else:
            found[name] = cloud
    # Not a `with` block: its exit would wait for a check that hangs.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(found)),
                                                 thread_name_prefix="orch-sky-check")
    futures = {name: pool.submit(check, cloud) for name, cloud in found.items()}
    pool.shutdown(wait=False)
    deadline = time.monotonic() + timeout_s
    ok = []
    for name, future in futures.items():
        try:
            good, reason = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except concurrent.futures.TimeoutError:
            good, reason = False, (f"its credential check did not answer within {timeout_s:g} s "
                                   f"(`sky check {name}` shows what it waits for)")
        if good:
            ok.append(name)
        else:
            why[name] = " ".join(reason.split()) if reason and reason.strip() else "no credentials"  # whole
    return [c for c in clouds if c in ok], why


def _resources(offer: PlacedOffer, launch: Launch):
    import sky

    vm = dict(launch.vm)
    zone = vm.pop("zone", None)  # SkyPilot takes a zone inside infra, beside which it refuses one
    infra = str(offer.cloud) + (f"/{offer.region}" if offer.region else "")
    if zone and offer.region:
        infra += f"/{zone}"
    kw: dict = {"infra": infra, "use_spot": bool(offer.spot)}
    if offer.gpu:
        count = offer.offer_count or offer.count or 1
        kw["accelerators"] = {offer.gpu: count}
    elif offer.instance_type:
        kw["instance_type"] = offer.instance_type
    if launch.disk_size:
        kw["disk_size"] = launch.disk_size
    # Exit PREEMPTED_EXIT asks for another run (docs/preemption.md), not an error; preempted
    # spot VMs come back elsewhere, and errors on spot retry once.
    kw["job_recovery"] = {"strategy": "EAGER_NEXT_REGION", "recover_on_exit_codes": [PREEMPTED_EXIT],
                          "max_restarts_on_errors": 1 if offer.spot else 0}
    kw.update(vm)  # the job file's own VM keys (image_id, ports, ...) win
    # Read as SkyPilot reads a task file's resources, so every form its schema takes works.
    return next(iter(sky.Resources.from_yaml_config(kw)))


def build_task(launch: Launch):
    """The SkyPilot task for a launch: chosen offer first, fallbacks in cost order."""
    sky_env()
    import sky

    if not launch.offers:
        raise BackendError(f"{launch.job_id}: no cloud offer to launch on")
    mounts = {f"{RUNNER_DIR}/{NAME}": str(SOURCE), **launch.file_mounts}
    from orchestrator.base.redact import looks_secret

    # Credential-like envs travel as SkyPilot secrets, which SkyPilot keeps out of its records.
    envs = {k: v for k, v in launch.env.items() if not looks_secret(k)}
    secrets = {**{k: v for k, v in launch.env.items() if looks_secret(k)}, **launch.secrets}
    setup = ("set -e\n"
             "pip install -q 'ray[train]>=2.50' torch scikit-learn boto3 pyarrow\n"
             + (launch.setup or ""))
    task = sky.Task(name=launch.job_id, run=launch.entrypoint, setup=setup, envs=envs,
                    secrets=secrets or None, workdir=launch.workdir, num_nodes=launch.num_nodes)
    task.set_file_mounts(mounts)
    offers = list(launch.offers)[: 1 + FALLBACKS]
    task.set_resources([_resources(o, launch) for o in offers])
    if launch.task_keys:
        # The job file's own task keys (config, inputs, outputs, volumes), read by SkyPilot's
        # loader as it reads them in a task file: a round trip through its YAML form.
        task = sky.Task.from_yaml_config({**task.to_yaml_config(), **launch.task_keys})
    return task


def task_yaml(launch: Launch) -> dict:
    """The task as YAML data, secret values left out: `sky launch --secret NAME` gives them."""
    config = build_task(launch).to_yaml_config()
    if config.get("secrets"):
        config["secrets"] = {k: None for k in config["secrets"]}
    if launch.task_keys:
        # The job file's task keys as it wrote them: SkyPilot's YAML form spreads `config`
        # into each candidate's `_cluster_config_overrides`, which it then refuses beside
        # a `config:` when it reads the file again.
        res = config.get("resources") or {}
        for cand in res.get("ordered") or res.get("any_of") or [res]:
            cand.pop("_cluster_config_overrides", None)
        config.update(launch.task_keys)
    return config


class SkySDK:
    """The only code that calls SkyPilot's client SDK (through its API server)."""

    def __init__(self, timeout_s: float = 60.0):
        sky_env()
        self.timeout_s = timeout_s

    def launch(self, task, name: str) -> str:
        import sky

        return str(sky.jobs.launch(task, name=name))  # a request id; the server does the work

    def request(self, request_id: str) -> tuple[str, Optional[str]]:
        """(status, error) of an API request: PENDING, RUNNING, SUCCEEDED, FAILED, ..."""
        import sky

        found = sky.api_status([request_id])
        if not found:
            return "FAILED", f"SkyPilot has no request {request_id}"
        req = found[0]
        status = str(getattr(req, "status", "")).split(".")[-1].upper()
        error = None
        if status == "FAILED":
            try:
                # SkyPilot types ids as its RequestId (a str subclass); any str works.
                sky.get(request_id)  # type: ignore[arg-type]
            except Exception as e:  # the launch's own error, e.g. NoCloudAccessError
                error = f"{type(e).__name__}: {e}"
        return status, error

    def queue(self, name: str) -> list[dict]:
        import sky

        result = sky.get(sky.jobs.queue_v2(refresh=False, name_match=name, all_users=False))
        records = result[0] if isinstance(result, tuple) else result
        out = []
        for r in records:
            d = r.model_dump() if hasattr(r, "model_dump") else dict(r)
            if d.get("job_name") == name:
                out.append(d)
        return out

    def logs(self, name: str) -> str:
        import sky

        buf = io.StringIO()
        sky.jobs.tail_logs(name=name, follow=False, output_stream=buf)
        return buf.getvalue()

    def cancel(self, name: str) -> None:
        import sky

        sky.get(sky.jobs.cancel(name=name))


class CloudProvider(Backend, HasLaunchInfo):
    """Managed jobs on rented VMs; the runner starts under the VM's `python3`, into which
    the task's setup installs what it needs."""

    name = CLOUD
    launch_grace_s = 600.0  # a launch request can take minutes to reach SkyPilot's queue
    clones_git_workdir, runs_once = True, False  # SkyPilot runs a run: command on each node

    def __init__(self, sdk=None, startup_minutes: float = 6.0, clock=time.time):
        self.sdk = sdk or SkySDK()
        self.clock = clock
        self.address = "skypilot"
        self.startup_minutes = startup_minutes
        self.requests: dict[str, str] = {}

    @classmethod
    def default_storage(cls, settings: Settings) -> Optional[str]:
        """`cloud_storage`: a recovered spot VM resumes only from shared storage."""
        return settings.cloud_storage

    @classmethod
    def shell_prelude(cls) -> str:
        """The runner's package on PYTHONPATH: SkyPilot passes the task's envs quoted, so
        the `~` of RUNNER_DIR there is never expanded."""
        home = RUNNER_DIR.replace("~", "$HOME", 1)
        return f'export PYTHONPATH="{home}${{PYTHONPATH:+:$PYTHONPATH}}"\n'

    @classmethod
    def train_command(cls, num_nodes: int) -> str:
        """On num_nodes > 1 VMs, the runner's multinode joins them in one Ray cluster, and
        its head runs the runner over all of them."""
        runner = cls.runner_command()
        return runner if num_nodes == 1 else f"python3 -m {module('multinode')} -- {runner}"

    @classmethod
    def adapt_launch(cls, launch: Launch, spec: JobSpec, decision: Optional[Placement]) -> Launch:
        """The offers in cost order (the chosen one first, then the eligible cloud
        alternatives as fallbacks), the file mounts, the nodes and the disk; for a
        multi-node `train:` job, a fresh token for its Ray cluster, sent as a secret."""
        if decision is None or decision.choice is None:
            raise BackendError(f"{launch.job_id}: no cloud offer to launch on")
        chosen = decision.choice
        offers = [chosen] + [a for a in decision.alternatives
                             if a.target == cls.name and a.excluded is None and a != chosen]
        if spec.train is not None and spec.num_nodes > 1:
            import secrets

            launch = dataclasses.replace(launch, secrets={
                **launch.secrets, "RAY_AUTH_TOKEN": secrets.token_hex(32)})
        return dataclasses.replace(launch, offers=tuple(offers),
                                   file_mounts=spec.file_mounts, num_nodes=spec.num_nodes,
                                   disk_size=spec.resources.disk_size,
                                   vm=spec.resources.for_cloud_vm(), task_keys=spec.task_keys())

    def prepare(self) -> None:
        """Nothing to start: the SDK starts SkyPilot's local API server on first use."""

    def _queue(self, backend_id: str) -> list[dict]:
        """SkyPilot's records of the job: none when SkyPilot has no jobs controller, which
        it answers with ClusterNotUpError ("No in-progress managed jobs."). A stopped
        controller is a BackendError: the job's last state is then unreadable."""
        try:
            return self.sdk.queue(backend_id)
        except Exception as e:
            controller = controller_not_up(e)
            if controller == "none":
                return []
            if controller:
                raise BackendError(f"SkyPilot's jobs controller is {controller}, so it cannot say "
                                   f"what became of {backend_id}: {e}",
                                   "`sky jobs queue --refresh` starts the controller again") from None
            raise

    def submit(self, launch: Launch) -> str:
        try:
            if self._queue(launch.job_id):
                return launch.job_id  # launched before a crash: never twice
            self.requests[launch.job_id] = self.sdk.launch(build_task(launch), launch.job_id)
        except BackendError:
            raise
        except Exception as e:
            what, hint = refusal(e)
            raise BackendError(f"SkyPilot did not accept {launch.job_id}: {what}", hint) from None
        return launch.job_id

    def launch_info(self, backend_id: str) -> dict:
        """The id of this process's launch request, which `state` follows until the job
        reaches SkyPilot's queue."""
        rid = self.requests.get(backend_id)
        return {"sky_request_id": rid} if rid else {}

    def state(self, backend_id: str, info: Optional[dict] = None) -> BackendState:
        info = info or {}
        try:
            records = self._queue(backend_id)
        except BackendError:
            raise
        except Exception as e:
            raise BackendError(f"cannot read managed job {backend_id} from SkyPilot: "
                               f"{refusal(e)[0]}", "`sky api info` checks the API server") from None
        if not records:  # not in the queue yet: the launch request may still be working
            rid = info.get("sky_request_id")
            if not rid:
                return BackendState("FAILED", f"SkyPilot has no job {backend_id}", unknown=True)
            status, error = self.sdk.request(rid)
            if status in ("FAILED", "CANCELLED"):
                return BackendState("FAILED", f"the launch failed: {error or status}")
            return BackendState("PENDING", "SkyPilot is provisioning")
        rec = records[-1]
        sky_status = str(rec.get("status") or "").split(".")[-1]
        ledger = update_ledger(info.get("ledger"), rec, info.get("offers") or [], self.clock(),
                               self.startup_minutes)
        message = _WHY.get(sky_status) or rec.get("failure_reason") or sky_status.lower()
        if rec.get("failure_reason") and sky_status.startswith("FAILED"):
            message = f"{_WHY.get(sky_status, sky_status)}: {rec['failure_reason']}"
        return BackendState(_STATES.get(sky_status, "FAILED"), message,
                            info={"ledger": ledger.model_dump(mode="json"), "sky_status": sky_status,
                                  "sky_job_id": rec.get("job_id"), "infra": rec.get("infra")})

    def logs(self, backend_id: str) -> str:
        """SkyPilot answers "" for a job it has no record of (its error stays on the server)."""
        try:
            return self.sdk.logs(backend_id)
        except Exception as e:
            raise BackendError(f"cannot read logs of {backend_id} from SkyPilot: {refusal(e)[0]}",
                               f"`sky jobs logs --name {backend_id}`") from None

    def cancel(self, backend_id: str) -> None:
        """A controller that is not up has no job in progress: nothing to stop."""
        try:
            self.sdk.cancel(backend_id)
        except Exception as e:
            if controller_not_up(e):
                return
            raise BackendError(f"cannot cancel {backend_id} through SkyPilot: {refusal(e)[0]}",
                               f"`sky jobs cancel --name {backend_id}`") from None
