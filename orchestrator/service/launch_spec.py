"""What a provider runs for a job: its command, environment, checkpoint storage and the
run it resumes, as one `Launch`, shaped by the target's backend class (its runner, its
default storage); for a cloud VM also the offers to try and the mounts."""

from __future__ import annotations

import shlex
from typing import Optional

from jobs.telemetry import IdlePolicy
from orchestrator.base.preemption import CHECKPOINT_VAR, EXIT_VAR, PREEMPTED_EXIT
from orchestrator.records import JobRow
from orchestrator.records.placement import Placement
from orchestrator.service.budgets import run_budget
from orchestrator.service.core import Core
from orchestrator.service.resume import ResumePoint
from orchestrator.spec import JobSpec, UtilizationPolicy
from providers.base import JobTags, Launch

# Ray Train's controller drains reports on its health check; 0.2 s keeps reports cheap.
_RAY_TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def launch_for(core: Core, job_id: str, spec: JobSpec, target: str,
               decision: Optional[Placement] = None, secrets: Optional[dict] = None,
               event_key: str = "") -> Launch:
    """What the provider runs. `secrets` are the `secrets:` values (None: read them now).
    `event_key`: the job's (JobInfo.event_key), handed to a `train:` job's runner among
    its secrets; a `run:` job has no runner, so none of its lines is signed."""
    from orchestrator.decision.demand import job_demand

    endpoint = core.settings.s3_endpoint_url
    # An address, not a secret: boto3 and pyarrow in the job's own code find S3 there too.
    aws = {"AWS_ENDPOINT_URL_S3": endpoint} if endpoint else {}  # S3 only, not every AWS service
    env = {**_RAY_TRAIN_ENV, **aws, **spec.env_strings(), "ORCH_JOB_ID": job_id}
    workdir = spec.workdir_path()
    backend = core.backend_class(target)
    if spec.git_workdir is not None and not backend.clones_git_workdir:
        from orchestrator.service.git_workdir import checkout, checkout_folder, reach

        workdir = checkout(spec, checkout_folder(core.settings.home, job_id),
                           reach(core.settings))
    storage = spec.checkpoint.storage or backend.default_storage(core.settings)
    resume = resume_point(core, spec, before=job_id)
    run_name = resume.run_name if resume else job_id
    if resume:
        storage = resume.storage_path
    # The preemption contract (docs/preemption.md): the code that asks for another run, and
    # where this job's checkpoints live across its runs (a `run:` job's own choice to use).
    env[EXIT_VAR] = str(PREEMPTED_EXIT)
    if storage:
        env[CHECKPOINT_VAR] = f"{storage.rstrip('/')}/{run_name}"
    # What the job holds on the offer it was placed on: what `orch serve`'s queue
    # reserves for it and placement's wait estimate assumed.
    choice = decision.choice if decision else None
    holds = job_demand(spec, choice)
    use_gpu = spec.scaling.use_gpu
    if use_gpu == "auto" and choice is not None:
        use_gpu = holds.gpus > 0  # as placed and priced, not what the target happens to have
    if spec.train is not None:
        from jobs.request import ENV_VAR, RunRequest

        train_target = spec.train.job or spec.train.entrypoint
        assert train_target is not None  # the spec holds exactly one of them
        budget = run_budget(core, spec, choice, job_id)
        run = RunRequest(
            job_id=job_id, run_name=run_name, target=train_target,
            config=spec.train.config, num_workers=spec.scaling.min_workers, use_gpu=use_gpu,
            max_workers=spec.scaling.max_workers if spec.scaling.elastic else None,
            precision=spec.precision, loader_workers=spec.data.loader_workers,
            pin_memory=spec.data.pin_memory, cpus_per_worker=_cpus_per_worker(spec),
            storage_path=storage, num_to_keep=spec.checkpoint.num_to_keep,
            max_failures=spec.checkpoint.max_failures, placement=spec.scaling.placement,
            s3_endpoint_url=endpoint if endpoint and storage and storage.startswith("s3://") else None,
            budget=budget,
            telemetry_interval_s=core.settings.telemetry_interval_seconds,
            utilization_policy=_idle_policy(spec.utilization_policy or core.settings.utilization_policy),
            telemetry_point_s=core.settings.telemetry_point_seconds)
        env[ENV_VAR] = run.to_json()
        command = backend.train_command(spec.num_nodes)
    else:
        assert spec.run is not None  # the spec holds exactly one of train: and run:
        command = spec.run
    if spec.setup and spec.train is not None and backend.runs_once:
        # The runner runs it, in a child that never holds the event key (jobs/secret_env.py).
        from jobs.secret_env import SETUP_VAR

        env[SETUP_VAR] = spec.setup
    elif spec.setup:
        command = f"set -e\n{spec.setup}\nset +e\n{command}"
    kept = None
    if spec.run is not None:
        kept = kept_folder(storage)
        earlier = f"{kept}/{run_name}" if resume and kept else None
        has_workdir = workdir is not None or spec.git_workdir is not None  # a VM clones a repo
        if spec.num_nodes > 1 and backend.runs_once:  # one process a node, as SkyPilot does
            command = own_folder(backend.module_command("per_node"), job_id, command, kept,
                                 earlier, nodes=(spec.num_nodes, int(holds.gpus // spec.num_nodes)),
                                 copy=has_workdir)
        else:
            command = own_folder(backend.module_command("workspace"), job_id, command, kept,
                                 earlier, copy=has_workdir)
    command = backend.shell_prelude() + command
    entrypoint = f"bash -c {shlex.quote(command)}"
    est_hours = decision.estimate.hours if decision else None
    # The cluster keeps these with the job, so any orch can estimate the queue from them.
    storage_path = storage if spec.train and storage else None
    if spec.train is None and kept:  # a run: job's folder is kept there (jobs/workspace.py)
        storage_path, run_name = kept, job_id
    tags = JobTags(orch_job=job_id, name=spec.name or "job", cpus=holds.cpus, gpus=holds.gpus,
                   nodes=spec.num_nodes,
                   est_hours=round(est_hours, 4) if est_hours is not None else None,
                   storage_path=storage_path,
                   run_name=run_name if spec.train or storage_path else None)
    secrets = spec.secret_strings() if secrets is None else dict(secrets)
    if spec.train is not None and event_key:
        from jobs.events import KEY_VAR

        secrets[KEY_VAR] = event_key
    from providers.base import split_env

    hidden = split_env(env, secrets)[1]
    return Launch(job_id=job_id, entrypoint=entrypoint, env=env, secrets=secrets,
                  workdir=str(workdir) if workdir else None, tags=tags,
                  excludes=left_out(workdir, spec.source_file, hidden.values()))


_SCAN_FILE_MAX = 2 << 20  # bytes of one workdir file read for secret values, at most
_SCAN_FILES_MAX = 5000


def left_out(workdir, source: Optional[str], values) -> tuple[str, ...]:
    """What never goes with the job's workdir: its job file, and any file that holds one of
    the job's secret `values` (a sibling job file with them inline, when the workdir is the
    job file's folder), as '/path' patterns from the workdir's top."""
    import os
    from pathlib import Path

    out = list(job_file_in(workdir, source))
    needles = [v.encode() for v in values if isinstance(v, str) and len(v) >= 8]
    if not workdir or not needles:
        return tuple(out)
    top, seen = Path(workdir), 0
    for dirpath, _, files in os.walk(top):
        for name in files:
            seen += 1
            path = Path(dirpath) / name
            try:
                if seen > _SCAN_FILES_MAX or path.is_symlink() or path.stat().st_size > _SCAN_FILE_MAX:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if any(n in data for n in needles):
                out.append(f"/{path.relative_to(top).as_posix()}")
    return tuple(dict.fromkeys(out))


def job_file_in(workdir, source: Optional[str]) -> tuple[str, ...]:
    """The job file as a path to leave out of its workdir ('/job.yaml'), when it lies in
    it: its text may hold secret values inline, which no copy of the workdir may keep."""
    from pathlib import Path

    if not workdir or not source or source == "<job>":
        return ()
    try:
        rel = Path(source).resolve().relative_to(Path(workdir).resolve())
    except (ValueError, OSError):
        return ()
    return (f"/{rel.as_posix()}",)


def kept_folder(storage: Optional[str]) -> Optional[str]:
    """Where a `run:` job's folder is kept: its checkpoint storage when that is a path on
    the node (local, or a mount the cluster shares); None for object storage."""
    return storage.rstrip("/") or "/" if storage and "://" not in storage else None


def own_folder(workspace: str, job_id: str, command: str, root: Optional[str],
               resume: Optional[str], nodes: Optional[tuple[int, int]] = None,
               copy: bool = True) -> str:
    """`command` run by jobs/workspace.py (the shell line `workspace` starts it) in a fresh
    folder of the job's own under `root`, given a copy of `resume` (an earlier job's folder)
    first; never in Ray's unpacked workdir, which every job with the same files shares.
    `nodes` (count, GPUs each): `workspace` is jobs/per_node.py, which runs it on each.
    `copy` False: the job has no workdir, and starts in an empty folder (the folder Ray's
    driver starts in is the node's own, never to be copied)."""
    args = [f"--nodes {nodes[0]} --gpus {nodes[1]}"] if nodes else []
    args.append(f"--job {shlex.quote(job_id)}")
    if not copy:
        args.append("--no-workdir")
    if root:
        args.append(f"--root {shlex.quote(root)}")
    if resume:
        args.append(f"--resume {shlex.quote(resume)}")
    return f"{workspace} {' '.join(args)} -- bash -c {shlex.quote(command)}"


def resume_point(core: Core, spec: JobSpec, before: Optional[str] = None) -> Optional[ResumePoint]:
    """The run `checkpoint.resume_from` continues (see orchestrator.service.resume); `before` is
    the job being launched: neither it nor a later job is a candidate. `submit` calls
    it before recording anything."""
    from orchestrator.service import resume

    return resume.resume_point(spec, earlier_jobs(core, before) if spec.checkpoint.resume_from else [])


def earlier_jobs(core: Core, before: Optional[str]) -> list[JobRow]:
    """Every job recorded before `before` (all jobs when it is None), newest first."""
    store = core.store_if_exists()
    if store is None:
        return []  # no jobs yet, and a rejected job file must not create the store
    jobs = store.list(limit=1_000_000)
    mine = next((r for r in jobs if r.id == before), None)
    if mine is None:
        return jobs  # not recorded (a test, a plan): every job is earlier
    # Later jobs too: a job submitted meanwhile must not change what this one resumes.
    return [r for r in jobs if r.id != before and r.created_at <= mine.created_at]


def for_cloud(launch: Launch, spec: JobSpec, decision: Placement) -> Launch:
    """What a cloud VM needs beyond the command (CloudProvider.adapt_launch): the
    offers in cost order and the file mounts; `orch plan` shows the task it makes."""
    from providers.cloud import CloudProvider

    return CloudProvider.adapt_launch(launch, spec, decision)


def _cpus_per_worker(spec: JobSpec) -> Optional[int]:
    """The CPUs each Ray Train worker may use, when the job file says (resources.cpus over
    its workers); None lets the runner share the node's CPUs among the workers on it."""
    from orchestrator.spec import quantity_min

    cpus = quantity_min(spec.resources.cpus)
    return None if cpus is None else max(1, int(cpus // spec.scaling.max_workers))


def _idle_policy(policy: Optional[UtilizationPolicy]) -> Optional[IdlePolicy]:
    """The job file's (or the team's default) utilization_policy, as the runner reads it."""
    if policy is None:
        return None
    return IdlePolicy(min_utilization=policy.min_utilization, window_minutes=policy.window_minutes,
                      action=policy.action)
