"""Service wiring: turns a spec into a recorded, launched job and keeps records in step
with the backends. The CLI calls these functions; they do not print."""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from orchestrator import failpoints, redact
from orchestrator.checks import check_runnable
from orchestrator.errors import BackendError, InputError, OrchError
from orchestrator.fingerprint import fingerprint
from orchestrator.run_metrics import add_scaling, from_log
from orchestrator.settings import Settings
from orchestrator.spec import JobSpec
from orchestrator.store import TERMINAL, Store, new_job_id, open_store, store_exists
from providers.base import Launch

# Ray Train's controller drains reports on its health check; 0.2 s keeps reports cheap.
_RAY_TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


class Orch:
    def __init__(self, settings: Settings, on_ray_start: Optional[Callable[[], None]] = None):
        self.settings = settings
        self.on_ray_start = on_ray_start
        self._providers: dict = {}
        self._secrets: dict[str, dict] = {}  # job id -> secret values, for this process only

    @functools.cached_property
    def store(self) -> Store:
        # Opened on first use, so a rejected job file never creates or touches the store.
        return open_store(self.settings)

    # -- providers --------------------------------------------------------------------

    def local_ray(self):
        from providers.local_ray import LocalRay

        return LocalRay(self.settings.home, cpus=self.settings.local.cpus,
                        object_store_mb=self.settings.local.object_store_mb)

    def provider(self, target: str):
        if target not in self._providers:
            if target == "local":
                from providers.local import LocalProvider

                self._providers[target] = LocalProvider(self.local_ray(), self.on_ray_start)
            elif target == "onprem" and self.settings.ray_address:
                from providers.onprem import OnPremProvider

                self._providers[target] = OnPremProvider(self.settings.ray_address,
                                                         self.settings.ray_token_file)
            elif target == "cloud":
                from providers.cloud import CloudProvider

                self._providers[target] = CloudProvider(
                    startup_minutes=self.settings.cloud_startup_minutes)
            else:
                raise InputError(f"target {target!r} is not available in this version of orch",
                                 "use placement.allow: [local] or ORCH_MODE=local")
        return self._providers[target]

    # -- submit -----------------------------------------------------------------------

    def place(self, spec: JobSpec, fp: str, dirty: bool) -> dict:
        """Where the job runs and why: the same decision `orch plan` shows."""
        from orchestrator import planning

        history = planning.history_for(fp, self.settings)
        decision = planning.plan_job(spec, self.settings, fingerprint=fp, history=history,
                                     code_dirty=dirty)
        if decision.choice is None:
            raise InputError(f"{spec.source_file or spec.name}: no place to run this job: "
                             f"{decision.refusal}",
                             "`orch plan FILE` lists every alternative and why it was excluded")
        notes: list[str] = []
        if decision.target == "cloud":
            decision, notes = self._with_enabled_clouds(spec, fp, dirty, history, decision)
        if decision.target == "cloud" and spec.num_nodes > 1:
            # Each node would run the runner and start a Ray of its own; joining them into
            # one cluster on the VMs is not built yet.
            raise spec.error("num_nodes", "cloud jobs run on one node for now",
                             "ask for more GPUs per node (e.g. H100:8) instead of more nodes")
        record = decision.to_dict()
        record["reasons"] = notes + record["reasons"]
        record["warnings"] = notes
        record["alternatives"] = record["alternatives"][:10]  # the record keeps the best few
        return record

    def _with_enabled_clouds(self, spec, fp, dirty, history, decision):
        """A cloud choice needs credentials for that cloud. Without them, say so and how to
        enable one (`sky check`), and re-plan without the clouds that are not enabled."""
        from orchestrator import planning
        from providers.cloud import enabled_clouds

        enabled, why = enabled_clouds(self.settings.clouds)
        if decision.choice.offer.cloud in enabled:
            return decision, []
        off = "; ".join(f"{c}: {w}" for c, w in why.items())
        settings = self.settings.model_copy(update={"clouds": enabled})
        again = planning.plan_job(spec, settings, fingerprint=fp, history=history, code_dirty=dirty)
        if again.choice is None:
            raise InputError(f"{spec.source_file or spec.name}: the cheapest place for this job is "
                             f"{decision.choice.offer.cloud}, but no configured cloud is enabled "
                             f"({off}), and without the cloud: {again.refusal}",
                             "run `sky check` to enable a cloud (SkyPilot shows what each needs), "
                             "or allow owned hardware in placement.allow")
        note = (f"no cloud is enabled for {decision.choice.offer.cloud} ({off}); `sky check` "
                f"enables one. Instead: {again.target}")
        return again, [note]

    def submit(self, spec: JobSpec, idempotency_key: Optional[str] = None) -> dict:
        """Check, record (PENDING, with its idempotency key), then launch, storing the
        backend's id as soon as it exists. Bad input raises before anything is written.

        A key seen before returns that job: launched, ended, or still being launched by a
        live orch, it is left alone; recorded by an orch that died before its launch, this
        call takes the launch over. The backend knows the job by orch's id, so a launch
        that did happen is found, never repeated."""
        rec, secrets = self.record(spec, idempotency_key)
        if rec.get("existing"):  # this key was submitted before
            sub = (rec["info"] or {}).get("submitter")
            if rec["backend_id"] or rec["status"] in TERMINAL or sub is None or alive(sub):
                return rec
            # Its orch died before storing a launch: take the launch over, as it was planned.
            rec = self.store.update(rec["id"], info={**(rec["info"] or {}), "submitter": submitter()})
            self.store.set_status(rec["id"], "PENDING", "launch taken over by a resubmit with "
                                  "the same idempotency key")
        return self.launch(rec, spec, secrets)

    def record(self, spec: JobSpec, idempotency_key: Optional[str] = None, *,
               owner: Optional[str] = None, priority: int = 0,
               info: Optional[dict] = None) -> tuple[dict, dict]:
        """Check, plan and record a job as PENDING; nothing is launched. Returns the record
        (with "existing": True when the key was submitted before) and the `secrets:` values.
        `orch serve` records a job here and launches it when its turn in the queue comes."""
        check_runnable(spec)
        self.resume_point(spec)  # a resume_from that names no usable run: refused, nothing written
        secrets = spec.secret_strings()  # a secret with no value is a job-file error
        fp, dirty = fingerprint(spec)
        decision = self.place(spec, fp, dirty)
        failpoints.reached("planned")
        hidden = redact.secret_env(spec.envs, secrets)
        salt = redact.new_salt()
        job_id = new_job_id()
        info = {**(info or {}), "submitter": submitter()}
        if hidden:  # digests only: a log read after this process is gone is still redacted
            key = redact.store_key(self.settings.home)
            info.update(secret_salt=salt, secret_hmacs=redact.digests(hidden.values(), salt, key))
        rec = self.store.create_job(
            name=spec.name or "job", spec=redact.redact_spec(spec.model_dump(mode="json")),
            kind=decision["kind"], target=decision["target"], fingerprint=fp, decision=decision,
            source_file=str(Path(spec.source_file).resolve()) if spec.source_file else None,
            idempotency_key=idempotency_key or f"auto-{job_id}", job_id=job_id, info=info,
            owner=owner, priority=priority)
        failpoints.reached("recorded")
        if rec["id"] != job_id:
            rec = {**rec, "existing": True}
        return rec, secrets

    def launch(self, rec: dict, spec: JobSpec, secrets: Optional[dict] = None) -> dict:
        """Launch a recorded job as it was planned; `secrets` None: read them now."""
        secrets = spec.secret_strings() if secrets is None else secrets
        decision = rec["decision"]
        target = rec["target"]
        provider = self.provider(target)
        self._secrets[rec["id"]] = redact.secret_env(spec.envs, secrets)
        try:
            provider.prepare()
            failpoints.reached("prepared")
            launch = self.launch_for(rec["id"], spec, target, decision, secrets)
            if target == "cloud":
                launch = self.for_cloud(launch, spec, decision)
            backend_id = self._retry(provider, "submit", launch)
            failpoints.reached("launched")
        except BackendError as e:
            self.store.set_status(rec["id"], "FAILED", f"launch failed: {e.message}")
            raise
        extra = getattr(provider, "launch_info", lambda _: {})(backend_id)
        if launch.offers:  # what the cloud ledger prices each launch with
            extra = {**extra, "offers": list(launch.offers)}
        info = {k: v for k, v in (rec["info"] or {}).items() if k != "queued"}
        # One write: the backend's id and what is needed to follow the job arrive together.
        rec = self.store.update(rec["id"], backend_id=backend_id, address=provider.address,
                                info={**info, "entrypoint": launch.entrypoint,
                                      "storage_path": launch.metadata.get("storage_path"),
                                      "run_name": launch.metadata.get("run_name"), **extra})
        failpoints.reached("stored")
        return rec

    def _retry(self, provider, op: str, *args):
        """Call provider.op with bounded retries and doubling waits; the last error is
        raised naming the backend, the attempts and what to do. Every call is safe to
        repeat: submit is idempotent by job id, the rest read or stop."""
        attempts, wait = self.settings.backend_retries, self.settings.backend_backoff_s
        # A launch may upload a workdir; everything else should answer quickly.
        timeout = self.settings.backend_timeout_s * (5 if op == "submit" else 1)
        for i in range(attempts):
            try:
                return _call_within(getattr(provider, op), args, timeout,
                                    f"{getattr(provider, 'name', 'the backend')} at "
                                    f"{getattr(provider, 'address', '?') or '?'}")
            except BackendError as e:
                if i == attempts - 1:
                    raise BackendError(f"{e.message} (after {attempts} attempts)", e.hint) from None
                time.sleep(wait * 2 ** i)

    def launch_for(self, job_id: str, spec: JobSpec, target: str,
                   decision: Optional[dict] = None, secrets: Optional[dict] = None) -> Launch:
        """What the provider runs. `secrets` are the `secrets:` values (None: read them now)."""
        from orchestrator.decision.demand import job_demand

        endpoint = self.settings.s3_endpoint_url
        # An address, not a secret: boto3 and pyarrow in the job's own code find S3 there too.
        aws = {"AWS_ENDPOINT_URL_S3": endpoint} if endpoint else {}  # S3 only, not every AWS service
        env = {**_RAY_TRAIN_ENV, **aws, **spec.env_strings(), "ORCH_JOB_ID": job_id}
        workdir = spec.workdir_path()
        if target == "local":
            storage = spec.checkpoint.storage or str(self.settings.home / "checkpoints")
        elif target == "cloud":  # a recovered spot VM resumes only from shared storage
            storage = spec.checkpoint.storage or self.settings.cloud_storage
        else:  # a path on the user's machine means nothing to the cluster
            storage = spec.checkpoint.storage or self.settings.onprem_checkpoint_storage
        resume = self.resume_point(spec, before=job_id)
        run_name = resume["run_name"] if resume else job_id
        if resume:
            storage = resume["storage_path"]
        # What the job holds on the offer it was placed on: what `orch serve`'s queue
        # reserves for it and placement's wait estimate assumed.
        holds = job_demand(spec, (decision or {}).get("choice"))
        use_gpu = spec.scaling.use_gpu
        if use_gpu == "auto" and (decision or {}).get("choice"):
            use_gpu = holds.gpus > 0  # as placed and priced, not what the target happens to have
        if spec.train is not None:
            from jobs.request import ENV_VAR, Budget, RunRequest

            budget = self.run_budget(spec, decision, job_id)
            run = RunRequest(
                job_id=job_id, run_name=run_name, target=spec.train.job or spec.train.entrypoint,
                config=spec.train.config, num_workers=spec.scaling.num_workers, use_gpu=use_gpu,
                precision=spec.precision, loader_workers=spec.data.loader_workers,
                pin_memory=spec.data.pin_memory, cpus_per_worker=_cpus_per_worker(spec),
                storage_path=storage, num_to_keep=spec.checkpoint.num_to_keep,
                max_failures=spec.checkpoint.max_failures, placement=spec.scaling.placement,
                s3_endpoint_url=endpoint if endpoint and storage and storage.startswith("s3://") else None,
                budget=Budget(**budget) if budget else None)
            env[ENV_VAR] = run.to_json()
            if target == "onprem":  # the cluster Ray's own Python, not the node's first python3
                from providers.ray_python import runner_command

                command = runner_command("jobs.runner")
            else:
                python = sys.executable if target == "local" else "python3"
                command = f"{shlex.quote(python)} -m jobs.runner"
        else:
            command = spec.run
        if spec.setup:
            command = f"set -e\n{spec.setup}\nset +e\n{command}"
        if target == "local":
            # `python` in a run: or setup: line means the interpreter orch (and its Ray) runs in.
            command = f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"\n{command}'
        entrypoint = f"bash -c {shlex.quote(command)}"
        est_hours = ((decision or {}).get("estimate") or {}).get("hours")
        # The cluster keeps these with the job, so any orch can estimate the queue from them.
        metadata = {"orch_job": job_id, "name": spec.name or "job", "cpus": holds.cpus,
                    "gpus": holds.gpus}
        if est_hours is not None:
            metadata["est_hours"] = round(est_hours, 4)
        if spec.train and storage:
            metadata["storage_path"] = storage
        if spec.train:
            metadata["run_name"] = run_name
        return Launch(job_id=job_id, entrypoint=entrypoint, env=env,
                      secrets=spec.secret_strings() if secrets is None else dict(secrets),
                      workdir=str(workdir) if workdir else None, metadata=metadata)

    def resume_point(self, spec: JobSpec, before: Optional[str] = None) -> Optional[dict]:
        """The run `checkpoint.resume_from` continues (see orchestrator.resume); `before` is
        the job being launched: neither it nor a later job is a candidate. `submit` calls
        it before recording anything."""
        from orchestrator.resume import resume_point

        return resume_point(spec, self._earlier_jobs(before) if spec.checkpoint.resume_from else [])

    def _earlier_jobs(self, before: Optional[str]) -> list[dict]:
        """Every job recorded before `before` (all jobs when it is None), newest first."""
        if not store_exists(self.settings):
            return []  # no jobs yet, and a rejected job file must not create the store
        jobs = self.store.list(limit=1_000_000)
        mine = next((r for r in jobs if r["id"] == before), None)
        if mine is None:
            return jobs  # not recorded (a test, a plan): every job is earlier
        # Later jobs too: a job submitted meanwhile must not change what this one resumes.
        return [r for r in jobs if r["id"] != before and r["created_at"] <= mine["created_at"]]

    def for_cloud(self, launch: Launch, spec: JobSpec, decision: dict) -> Launch:
        """What a cloud VM needs beyond the command: the offers in cost order (the chosen
        one first, then the eligible cloud alternatives as fallbacks) and the file mounts."""
        offers = [decision["choice"]] + [
            a for a in decision.get("alternatives", [])
            if a["target"] == "cloud" and a["excluded"] is None and a != decision["choice"]]
        return dataclasses.replace(launch, offers=tuple(offers),
                                   file_mounts=dict(spec.file_mounts), num_nodes=spec.num_nodes,
                                   disk_size=spec.resources.disk_size)

    # -- follow -----------------------------------------------------------------------

    def get(self, job_id: str) -> dict:
        return self.store.get(job_id)

    def refresh(self, rec: dict) -> dict:
        """Bring a job's record in step with its backend; finished jobs are left alone."""
        if rec["status"] in TERMINAL:
            return rec
        if not rec["backend_id"]:
            if (rec["info"] or {}).get("queued"):
                return rec  # waiting in `orch serve`'s queue: nothing was launched yet
            rec = self._recover_launch(rec)
            if not rec["backend_id"]:
                return rec
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self._finish(rec, "FAILED", "the local Ray instance stopped while the job was "
                                               "running (`orch local up` starts a new one)")
        try:
            state = self._retry(provider, "state", rec["backend_id"], rec["info"])
        except BackendError as e:
            # The job's history says when its backend stopped answering; its state stays the
            # last one known, since the job may well still be running there.
            self.store.set_status(rec["id"], rec["status"], f"last known {rec['status']}: {e.message}")
            raise
        info = rec["info"] or {}
        if state.info and any(info.get(k) != v for k, v in state.info.items()):
            rec = self.store.update(rec["id"], info={**info, **state.info})
        if state.status in TERMINAL:
            status = "CANCELLED" if rec["cancel_requested"] else state.status
            return self._finish(rec, status, (rec["info"] or {}).get("budget_stop") or state.message)
        if state.status == "RUNNING":
            metrics = from_log(self._redact(rec, self._retry(provider, "logs", rec["backend_id"])),
                               rec["metrics"])
            rec = self.store.set_status(rec["id"], "RUNNING", state.message, metrics=metrics)
            return self._enforce_budget(rec, provider)
        return rec

    # -- budgets ----------------------------------------------------------------------

    def budget_limit(self, spec_budget: dict, job_id: Optional[str] = None) -> Optional[tuple]:
        """(USD, what) the job may still spend: its budget.max_cost, or what is left of
        the monthly budget after every other job this month, whichever is smaller; both
        counted as settings.budget_basis says (cash by default)."""
        from orchestrator.decision.cost import fmt_money

        rate, cur = self.settings.currency_rate, self.settings.currency
        spent = "spent in cash" if self.settings.budget_basis == "cash" else "spent (full cost)"
        limits = []
        if spec_budget.get("max_cost"):
            limits.append((spec_budget["max_cost"] / rate,
                           f"budget.max_cost {fmt_money(spec_budget['max_cost'] / rate, cur, rate)}"))
        if self.settings.monthly_budget:
            monthly = self.settings.monthly_budget / rate
            others = self._month_spend(exclude=job_id)
            limits.append((max(0.0, monthly - others),
                           f"monthly_budget {fmt_money(monthly, cur, rate)} "
                           f"({fmt_money(others, cur, rate)} {spent} by other jobs)"))
        return min(limits) if limits else None

    def _month_spend(self, exclude: Optional[str] = None) -> float:
        from orchestrator import ledger

        if not store_exists(self.settings):
            return 0.0
        now = time.time()
        recs = self.store.list(limit=1_000_000, since=ledger.month_start(now))
        return ledger.month_spend((ledger.entry(r, now) for r in recs if r["id"] != exclude), now,
                                  self.settings.budget_basis)

    def run_budget(self, spec: JobSpec, decision: Optional[dict], job_id: str) -> Optional[dict]:
        """What the runner needs to stop itself at its budget, after a checkpoint: its
        price per hour on the budget's basis (owned hardware's power alone for cash)."""
        from orchestrator import ledger

        choice = (decision or {}).get("choice") or {}
        limit = self.budget_limit(spec.budget.model_dump(), job_id)
        price = ledger.hourly(choice, self.settings.budget_basis)
        if limit is None or price is None:
            return None
        startup = (self.settings.cloud_startup_minutes / 60.0 * price
                   if choice.get("target") == "cloud" else 0.0)
        budget = {"limit_usd": round(limit[0], 6), "what": limit[1], "spent_usd": round(startup, 6),
                  "price_per_hour_usd": price}
        if choice.get("target") != "cloud":
            # Owned hardware is held from submission on, as the ledger counts it; a cloud
            # VM bills from its start-up, which `spent_usd` covers, so its clock starts there.
            budget["t0"] = time.time()
        return budget

    def _enforce_budget(self, rec: dict, provider) -> dict:
        """Stop a running job whose cost reached its budget. A `train:` job stops itself at
        its next checkpoint once over (the runner watches the same figures); orch stops it
        outright only past a grace for that checkpoint: 10% of the limit or 5 minutes of its
        price, whichever is more. Any other job is stopped at the limit."""
        from orchestrator import ledger

        limit = self.budget_limit((rec["spec"] or {}).get("budget") or {}, rec["id"])
        if limit is None or rec["cancel_requested"]:
            return rec
        basis = self.settings.budget_basis
        spent = ledger.spend(ledger.entry(rec), basis)
        grace = 0.0
        if (rec["spec"] or {}).get("train"):
            price = ledger.hourly((rec["decision"] or {}).get("choice") or {}, basis) or 0.0
            grace = max(0.10 * limit[0], price * 5 / 60)
        if spent < limit[0] + grace:
            return rec
        from orchestrator.decision.cost import fmt_money

        msg = (f"stopped by orch: {limit[1]} reached ({fmt_money(spent, self.settings.currency, self.settings.currency_rate)} "
               f"spent); raise the budget to let it run longer")
        rec = self.store.update(rec["id"], cancel_requested=1,
                                info={**(rec["info"] or {}), "budget_stop": msg})
        self.store.set_status(rec["id"], "RUNNING", msg)
        self._retry(provider, "cancel", rec["backend_id"])
        return self.store.get(rec["id"])

    def _recover_launch(self, rec: dict, grace_s: float = 60.0, cloud_grace_s: float = 600.0) -> dict:
        """A job recorded but with no backend id: its `orch submit` died or is still launching.
        While that orch lives (or for `grace_s` when it cannot be checked), leave it be; then
        ask the backend, which knows the job by orch's id, before declaring it never launched."""
        sub = (rec["info"] or {}).get("submitter")
        gone = sub is not None and not alive(sub)
        age = time.time() - rec["created_at"]
        if not gone and age < grace_s:
            return rec  # a live submit may still be starting Ray or uploading the workdir
        never = ("never launched: the orch that submitted it stopped before the launch; "
                 "submit the job again")
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self.store.set_status(rec["id"], "FAILED", never)
        state = self._retry(provider, "state", rec["id"], None)
        if "has no job" in (state.message or ""):
            if rec["target"] == "cloud" and age < cloud_grace_s:
                return rec  # a launch request can take minutes to reach SkyPilot's queue
            return self.store.set_status(rec["id"], "FAILED", never)
        self.store.set_status(rec["id"], rec["status"], "found on the backend after its orch "
                              "stopped: followed from here")
        return self.store.update(rec["id"], backend_id=rec["id"], address=provider.address)

    def _finish(self, rec: dict, status: str, message: Optional[str]) -> dict:
        text = self.logs(rec)
        log_path = self.settings.home / "logs" / f"{rec['id']}.log"
        if text:
            write_private(log_path, text)
        metrics = from_log(text, rec["metrics"])
        result = metrics.pop("_result", None)
        if status == "SUCCEEDED" and result and result.get("ok") is False:
            status = "FAILED"
        if status == "FAILED" and result and result.get("error"):
            message = result["error"]
        stopped = metrics.get("stopped")
        if status == "SUCCEEDED" and stopped:  # the runner stopped itself at its budget
            status = "CANCELLED"
            message = (f"stopped at its budget after epoch {stopped.get('epoch')}: "
                       f"{stopped.get('detail')}; last checkpoint {metrics.get('checkpoint')}")
        if status == "SUCCEEDED":
            self._scaling(rec, metrics)
        rec = self.store.set_status(rec["id"], status, message, metrics=metrics,
                                    log_path=str(log_path) if text else rec["log_path"])
        from orchestrator import ledger

        # The ledger line, kept with the job: what it cost and what it passed over.
        return self.store.update(rec["id"], info={**(rec["info"] or {}), "cost": ledger.entry(rec)})

    def _scaling(self, rec: dict, metrics: dict) -> None:
        """With N workers, what they bought, against earlier one-worker runs of the same job."""
        add_scaling(metrics, [r["metrics"] or {} for r in
                              self.store.runs_for_fingerprint(rec["fingerprint"])
                              if r["status"] == "SUCCEEDED" and r["id"] != rec["id"]])

    def _redact(self, rec: dict, text: str) -> str:
        """The job's secrets out of `text`, and any credential orch's own environment holds
        (AWS_SECRET_ACCESS_KEY and the like), should the job have printed one."""
        if not text:
            return text
        info = rec["info"] or {}
        values = list((self._secrets.get(rec["id"]) or {}).values())
        values += [v for k, v in os.environ.items() if len(v) >= 8 and redact.looks_secret(k)]
        hmacs = info.get("secret_hmacs") or ()
        key = redact.store_key(self.settings.home, create=False) if hmacs else None
        return redact.redact_text(text, values, info.get("secret_salt", ""), hmacs, key,
                                  legacy=info.get("secret_digests") or ())

    def logs(self, rec: dict) -> str:
        """The job's log, secrets redacted: from the backend while it knows the job, else
        the saved copy."""
        return self._redact(rec, self._raw_logs(rec))

    def _raw_logs(self, rec: dict) -> str:
        if rec["status"] in TERMINAL and rec["log_path"] and Path(rec["log_path"]).exists():
            return Path(rec["log_path"]).read_text()
        if not rec["backend_id"]:
            return ""
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self._local_driver_log(rec)
        try:
            return provider.logs(rec["backend_id"])
        except BackendError:
            if rec["target"] == "local":
                return self._local_driver_log(rec)
            raise

    def _local_driver_log(self, rec: dict) -> str:
        """A stopped local Ray leaves its session's files on disk: read the driver log there."""
        temp = self.local_ray().temp_dir()
        for path in sorted(temp.glob(f"session_*/logs/job-driver-{rec['backend_id']}.log")):
            return path.read_text(errors="replace")
        return ""

    def cancel(self, job_id: str, wait_s: float = 30.0) -> dict:
        rec = self.store.get(job_id)
        if rec["status"] in TERMINAL:
            return rec
        self.store.update(rec["id"], cancel_requested=1)
        rec = self.store.get(rec["id"])
        if not rec["backend_id"]:
            return self.store.set_status(rec["id"], "CANCELLED", "cancelled before launch")
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self.refresh(rec)
        self._retry(provider, "cancel", rec["backend_id"])
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            rec = self.refresh(self.store.get(rec["id"]))
            if rec["status"] in TERMINAL:
                return rec
            time.sleep(0.5)
        return rec

    def list(self, limit: int = 50) -> list[dict]:
        out = []
        for rec in self.store.list(limit):
            try:
                out.append(self.refresh(rec))
            except OrchError:
                out.append(rec)  # shown as last known; `orch status ID` names the problem
        return out


def _cpus_per_worker(spec: JobSpec) -> Optional[int]:
    """The CPUs each Ray Train worker may use, when the job file says (resources.cpus over
    its workers); None lets the runner share the node's CPUs among the workers on it."""
    from orchestrator.spec import quantity_min

    cpus = quantity_min(spec.resources.cpus)
    return None if cpus is None else max(1, int(cpus // spec.scaling.num_workers))


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (a log may hold what the job printed), whole
    or not at all: a reader never sees half of it."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def submitter() -> dict:
    """Who is submitting: enough to tell later whether that process still lives."""
    import socket

    import psutil

    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": round(psutil.Process().create_time(), 2)}


def alive(sub: dict) -> bool:
    """Whether the submitting orch still runs; True when it cannot be told (another host)."""
    import socket

    import psutil

    if sub.get("host") != socket.gethostname():
        return True
    try:
        return round(psutil.Process(int(sub["pid"])).create_time(), 2) == sub.get("started")
    except (psutil.Error, KeyError, ValueError, TypeError):
        return False


def _call_within(fn, args: tuple, timeout_s: float, who: str):
    """fn(*args), or BackendError when it has not returned within `timeout_s`: a backend
    that hangs is reported like one that refuses. The call is left to finish in a daemon
    thread; every provider call is safe to have twice (submit is idempotent by job id)."""
    import threading

    box: dict = {}

    def run():
        try:
            box["value"] = fn(*args)
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True, name="orch-backend-call")
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise BackendError(f"{who} did not answer within {timeout_s:g} s",
                           "the backend is overloaded or hanging; `orch doctor` checks it")
    if "error" in box:
        raise box["error"]
    return box.get("value")
