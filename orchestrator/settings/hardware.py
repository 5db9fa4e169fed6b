"""The inventory in orch's settings: GPUs the user owns, this workstation, and GPUs they
might buy, each priced so that owned hardware is never free."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator


class OwnedGpus(BaseModel):
    """GPUs the user owns, priced so they are never free."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gpu: str = Field(description="accelerator name as SkyPilot spells it, e.g. A100-80GB; "
                                 "CPU for a pool of CPU-only nodes")
    count: int = Field(default=1, ge=1, description="GPUs (or, for a CPU pool, nodes)")
    cpus: Optional[int] = Field(default=None, ge=1, description="CPUs in the pool, all nodes together")
    # Required: owned hardware is never free, so orch will not guess what it cost.
    purchase_price: float = Field(..., ge=0, description="for all `count` GPUs with their host, USD")
    lifetime_years: float = Field(default=3.0, gt=0)
    utilization: float = Field(default=0.6, gt=0, le=1, description="expected busy fraction over the lifetime")
    watts: float = Field(default=300.0, ge=0, description="per GPU under load, host share included")

    @property
    def cpu_pool(self) -> bool:
        """`gpu = "CPU"`: a pool of CPU-only nodes, `count` of them."""
        return self.gpu.strip().upper() == "CPU"


class LocalMachine(BaseModel):
    """This workstation, when it is where a job runs."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    # A typical workstation, so that even unconfigured, local work is not priced as free.
    purchase_price: float = Field(default=2500.0, ge=0, description="USD; set your own")
    lifetime_years: float = Field(default=3.0, gt=0)
    utilization: float = Field(default=0.3, gt=0, le=1)
    watts: float = Field(default=150.0, ge=0, description="under load, whole machine")
    cpus: Optional[int] = Field(default=None, ge=1, description="CPUs given to the local Ray; default all")
    object_store_mb: int = Field(default=1024, ge=100)
    runner_host: bool = Field(default=True, description="keep a driver with torch imported and warm "
                              "worker processes beside the local Ray, so a training job starts in "
                              "seconds (its warm processes hold warm_pool_mb while idle); false: each job starts its own")
    warm_pool_mb: Optional[int] = Field(default=None, ge=0, description="memory the runner host's "
                                        "warm processes may hold, MiB: one run's are always kept, more "
                                        "(for jobs back to back) as they fit; unset: a tenth of this "
                                        "machine's, 1536-4096 (1536 holds two one-worker runs, 2160 three)")
    pass_env: list[str] = Field(default_factory=list, description="names of variables of orch's "
                                "own environment that the local Ray and its jobs get (e.g. "
                                "AWS_PROFILE); none: only PATH, HOME, the locale and what orch sets")

    @field_validator("pass_env", mode="before")
    @classmethod
    def _pass_env(cls, v):
        if isinstance(v, str):
            v = [x.strip() for x in v.split(",") if x.strip()]
        for name in v if isinstance(v, list) else []:
            if isinstance(name, str) and name.upper().startswith("ORCH_"):
                # orch's own settings: the store URL, the metrics token, the home.
                raise ValueError(f"{name}: orch's own settings never reach a job")
        return v


class BuyCandidate(BaseModel):
    """A GPU the user might buy: `orch advise` says when it would pay for itself."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    gpu: str = Field(description="accelerator name as SkyPilot spells it, e.g. RTX4090")
    count: int = Field(default=1, ge=1)
    purchase_price: float = Field(..., ge=0, description="USD for all `count` GPUs with their host")
    watts: float = Field(default=300.0, ge=0, description="per GPU under load, host share included")
    lifetime_years: float = Field(default=3.0, gt=0)
    speed: Optional[float] = Field(default=None, gt=0, description="relative to H100 = 1.0; "
                                   "default from orch's table and gpu_speeds")
