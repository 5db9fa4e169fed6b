"""Service wiring: turns a spec into a recorded, launched job and keeps records in step
with the backends. The CLI calls these functions; they do not print."""

from __future__ import annotations

import functools
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Callable, Optional

from jobs import events
from orchestrator.checks import check_runnable
from orchestrator.errors import BackendError, InputError, OrchError
from orchestrator.fingerprint import fingerprint
from orchestrator.settings import Settings
from orchestrator.spec import JobSpec
from orchestrator.store import TERMINAL, Store
from providers.base import Launch

# Ray Train's controller drains reports on its health check; 0.2 s keeps reports cheap.
_RAY_TRAIN_ENV = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


class Orch:
    def __init__(self, settings: Settings, on_ray_start: Optional[Callable[[], None]] = None):
        self.settings = settings
        self.on_ray_start = on_ray_start
        self._providers: dict = {}

    @functools.cached_property
    def store(self) -> Store:
        # Opened on first use, so a rejected job file never creates or touches the store.
        return Store(self.settings.home / "orch.db")

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
        if decision.target == "cloud":
            raise InputError(
                f"{spec.source_file or spec.name}: the cheapest place for this job is the cloud "
                f"({decision.choice.offer.cloud}), and this version of orch cannot launch there yet",
                "run it on owned hardware with `placement: {allow: [local, onprem]}`")
        record = decision.to_dict()
        record["alternatives"] = record["alternatives"][:10]  # the record keeps the best few
        return record

    def submit(self, spec: JobSpec, idempotency_key: Optional[str] = None) -> dict:
        """Check, record (PENDING), then launch. Bad input raises before anything is written."""
        check_runnable(spec)
        fp, dirty = fingerprint(spec)
        decision = self.place(spec, fp, dirty)
        target = decision["target"]
        provider = self.provider(target)
        rec = self.store.create_job(
            name=spec.name or "job", spec=spec.model_dump(mode="json"), kind=decision["kind"],
            target=target, fingerprint=fp, decision=decision,
            source_file=str(Path(spec.source_file).resolve()) if spec.source_file else None,
            idempotency_key=idempotency_key)
        if rec["backend_id"]:
            return rec  # the same key was submitted before
        try:
            provider.prepare()
            launch = self.launch_for(rec["id"], spec, target, decision)
            backend_id = provider.submit(launch)
        except BackendError as e:
            self.store.set_status(rec["id"], "FAILED", f"launch failed: {e.message}")
            raise
        return self.store.update(rec["id"], backend_id=backend_id, address=provider.address,
                                 info={"entrypoint": launch.entrypoint,
                                       "storage_path": launch.metadata.get("storage_path")})

    def launch_for(self, job_id: str, spec: JobSpec, target: str,
                   decision: Optional[dict] = None) -> Launch:
        from orchestrator.planning import job_needs

        env = {**_RAY_TRAIN_ENV, **spec.env_strings(), "ORCH_JOB_ID": job_id}
        workdir = spec.workdir_path()
        if target == "local":
            storage = spec.checkpoint.storage or str(self.settings.home / "checkpoints")
        else:  # a path on the user's machine means nothing to the cluster
            storage = spec.checkpoint.storage or self.settings.onprem_checkpoint_storage
        if spec.train is not None:
            run = {
                "job_id": job_id, "target": spec.train.job or spec.train.entrypoint,
                "config": spec.train.config, "num_workers": spec.scaling.num_workers,
                "use_gpu": spec.scaling.use_gpu, "precision": spec.precision,
                "loader_workers": spec.data.loader_workers, "pin_memory": spec.data.pin_memory,
                "storage_path": storage, "num_to_keep": spec.checkpoint.num_to_keep,
                "max_failures": spec.checkpoint.max_failures, "placement": spec.scaling.placement,
            }
            env["ORCH_RUN"] = json.dumps(run)
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
        cpus, gpus = job_needs(spec)
        est_hours = ((decision or {}).get("estimate") or {}).get("hours")
        # The cluster keeps these with the job, so any orch can estimate the queue from them.
        metadata = {"orch_job": job_id, "name": spec.name or "job", "cpus": cpus, "gpus": gpus}
        if est_hours is not None:
            metadata["est_hours"] = round(est_hours, 4)
        if spec.train and storage:
            metadata["storage_path"] = storage
        return Launch(job_id=job_id, entrypoint=entrypoint, env=env,
                      workdir=str(workdir) if workdir else None, metadata=metadata)

    # -- follow -----------------------------------------------------------------------

    def get(self, job_id: str) -> dict:
        return self.store.get(job_id)

    def refresh(self, rec: dict) -> dict:
        """Bring a job's record in step with its backend; finished jobs are left alone."""
        if rec["status"] in TERMINAL:
            return rec
        if not rec["backend_id"]:
            rec = self._recover_launch(rec)
            if not rec["backend_id"]:
                return rec
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self._finish(rec, "FAILED", "the local Ray instance stopped while the job was "
                                               "running (`orch local up` starts a new one)")
        state = provider.state(rec["backend_id"])
        if state.status in TERMINAL:
            status = "CANCELLED" if rec["cancel_requested"] else state.status
            return self._finish(rec, status, state.message)
        if state.status == "RUNNING":
            metrics = self._metrics_from(provider.logs(rec["backend_id"]), rec)
            return self.store.set_status(rec["id"], "RUNNING", state.message, metrics=metrics)
        return rec

    def _recover_launch(self, rec: dict, grace_s: float = 60.0) -> dict:
        """A job recorded but with no backend id: its `orch submit` died or is still launching.
        The backend knows the job by orch's id, so ask it before declaring the job lost."""
        if time.time() - rec["created_at"] < grace_s:
            return rec  # a live submit may still be starting Ray or uploading the workdir
        provider = self.provider(rec["target"])
        if rec["target"] == "local" and not provider.running:
            return self.store.set_status(rec["id"], "FAILED", "never launched: orch stopped "
                                         "before the launch; submit the job again")
        state = provider.state(rec["id"])
        if "has no job" in (state.message or ""):
            return self.store.set_status(rec["id"], "FAILED", "never launched: orch stopped "
                                         "before the launch; submit the job again")
        return self.store.update(rec["id"], backend_id=rec["id"], address=provider.address)

    def _finish(self, rec: dict, status: str, message: Optional[str]) -> dict:
        text = self.logs(rec)
        log_path = self.settings.home / "logs" / f"{rec['id']}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if text:
            log_path.write_text(text)
        metrics = self._metrics_from(text, rec)
        result = metrics.pop("_result", None)
        if status == "SUCCEEDED" and result and result.get("ok") is False:
            status = "FAILED"
        if status == "FAILED" and result and result.get("error"):
            message = result["error"]
        return self.store.set_status(rec["id"], status, message, metrics=metrics,
                                     log_path=str(log_path) if text else rec["log_path"])

    @staticmethod
    def _metrics_from(text: str, rec: dict) -> dict:
        """The last report's metrics, the run's chosen settings and the result, from events."""
        metrics = dict(rec["metrics"] or {})
        for ev in events.parse(text or ""):
            kind = ev["event"]
            if kind == "report":
                metrics.update(ev.get("metrics") or {})
                metrics["reports"] = ev.get("index")
                if ev.get("checkpoint"):
                    metrics["checkpoint"] = ev["checkpoint"]
            elif kind == "worker_setup":
                metrics["run_settings"] = {k: v for k, v in ev.items() if k != "event"}
            elif kind == "result":
                metrics.update(ev.get("metrics") or {})
                metrics["wall_s"] = ev.get("wall_s")
                if ev.get("checkpoint"):
                    metrics["checkpoint"] = ev["checkpoint"]
                metrics["_result"] = ev
        return metrics

    def logs(self, rec: dict) -> str:
        """The job's log: from the backend while it knows the job, else the saved copy."""
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
        provider.cancel(rec["backend_id"])
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
