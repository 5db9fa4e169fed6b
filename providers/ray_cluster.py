"""What a Ray cluster has and is doing, read over its dashboard's HTTP API.

Plain HTTP with a short timeout: an unreachable cluster answers in seconds, and reading
capacity never joins the cluster or starts a driver.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Optional

from orchestrator.base.errors import BackendError

_ACTIVE = ("PENDING", "RUNNING")


def get_json(base: str, path: str, headers: dict, timeout: float = 5.0,
             hint: str = "check ORCH_RAY_ADDRESS and that the Ray head is running") -> Any:
    """The parsed JSON answer to GET `path`: an object, or a list (the jobs endpoint)."""
    req = urllib.request.Request(base.rstrip("/") + path, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise BackendError(f"Ray at {base} refused orch's token (HTTP {e.code})",
                               "set ORCH_RAY_TOKEN_FILE to the cluster's auth token file") from None
        raise BackendError(f"{base} answered HTTP {e.code} for {path}: is it a Ray dashboard?",
                           hint) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise BackendError(f"cannot reach Ray at {base}: {reason}", hint) from None
    try:
        return json.loads(body)
    except ValueError:
        raise BackendError(f"{base} did not answer with JSON for {path}: is it a Ray dashboard?",
                           hint) from None


@dataclass(frozen=True)
class Node:
    node_id: str
    ip: str
    alive: bool
    is_head: bool
    cpus: float
    gpus: float
    gpu_model: Optional[str]


@dataclass(frozen=True)
class ClusterJob:
    submission_id: str
    status: str
    orch_id: Optional[str]
    name: Optional[str]
    start_time: Optional[float]  # epoch seconds
    est_hours: Optional[float]  # what orch estimated when it placed the job
    cpus: float  # what orch recorded the job holds (orchestrator.decision.demand); 0 for others
    gpus: float


@dataclass(frozen=True)
class ClusterSnapshot:
    address: str
    nodes: tuple[Node, ...]
    total: dict = field(default_factory=dict)  # {"CPU": n, "GPU": n}
    used: dict = field(default_factory=dict)
    jobs: tuple[ClusterJob, ...] = ()
    taken_at: float = 0.0

    def free(self, resource: str) -> float:
        return max(0.0, self.total.get(resource, 0.0) - self.used.get(resource, 0.0))

    def demands(self):
        """(total, used) CPUs and GPUs, as decision.demand counts them."""
        from orchestrator.decision.demand import Demand

        return (Demand(self.total.get("CPU", 0.0), self.total.get("GPU", 0.0)),
                Demand(self.used.get("CPU", 0.0), self.used.get("GPU", 0.0)))

    @property
    def gpu_models(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for n in self.nodes:
            if n.alive and n.gpus:
                out[n.gpu_model or "GPU"] = out.get(n.gpu_model or "GPU", 0) + n.gpus
        return out


def snapshot(address: str, headers: dict, timeout: float = 5.0) -> ClusterSnapshot:
    """Nodes, totals, usage and active jobs of the cluster at `address`."""
    get_json(address, "/api/version", headers, timeout)  # fail fast on a wrong address
    raw_nodes = get_json(address, "/api/v0/nodes?detail=1&limit=1000", headers, timeout)
    nodes = tuple(_node(n) for n in raw_nodes.get("data", {}).get("result", {}).get("result", []))
    status = get_json(address, "/api/cluster_status", headers, timeout)
    usage = (((status.get("data") or {}).get("clusterStatus") or {}).get("loadMetricsReport")
             or {}).get("usage") or {}
    total = {r: sum(getattr(n, r.lower() + "s") for n in nodes if n.alive) for r in ("CPU", "GPU")}
    used = {r: float(usage.get(r, [0.0, 0.0])[0]) for r in ("CPU", "GPU")}
    jobs_raw = get_json(address, "/api/jobs/", headers, timeout)
    jobs = tuple(j for j in (_job(x) for x in (jobs_raw if isinstance(jobs_raw, list) else []))
                 if j.status in _ACTIVE)
    return ClusterSnapshot(address, nodes, total, used, jobs, time.time())


def _node(n: dict) -> Node:
    res = n.get("resources_total") or {}
    model = next((k.split(":", 1)[1] for k in res if k.startswith("accelerator_type:")), None)
    labels = n.get("labels") or {}
    model = labels.get("ray.io/accelerator-type", model)
    return Node(node_id=n.get("node_id", ""), ip=n.get("node_ip", ""),
                alive=n.get("state") == "ALIVE", is_head=bool(n.get("is_head_node")),
                cpus=float(res.get("CPU", 0)), gpus=float(res.get("GPU", 0)), gpu_model=model)


def _job(j: dict) -> ClusterJob:
    meta = j.get("metadata") or {}

    def num(key: str) -> Optional[float]:
        try:
            return float(meta[key])
        except (KeyError, TypeError, ValueError):
            return None

    start = j.get("start_time")
    return ClusterJob(submission_id=j.get("submission_id") or j.get("job_id") or "",
                      status=str(j.get("status", "")), orch_id=meta.get("orch_job"),
                      name=meta.get("name"), start_time=start / 1000.0 if start else None,
                      est_hours=num("est_hours"), cpus=num("cpus") or 0.0,
                      gpus=num("gpus") or 0.0)
