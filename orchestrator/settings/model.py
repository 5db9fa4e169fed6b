"""The Settings model: every setting with its default, its check, and where it came from."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, PrivateAttr, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from orchestrator.base.inputs import clip, storage_problem
from orchestrator.settings.hardware import BuyCandidate, LocalMachine, OwnedGpus
from orchestrator.spec.sections import UtilizationPolicy


def _split_list(v: Any) -> Any:
    if isinstance(v, str):
        # ORCH_CLOUDS=runpod,aws; also the TOML spelling ["runpod", "aws"], copied into the env.
        return [x.strip().strip("'\"") for x in v.strip().strip("[]").split(",")
                if x.strip().strip("'\"")]
    return v


def _server_url(v: str) -> str:
    """One `orch serve` URL, checked: http(s)://host[:port], no path."""
    if "://" not in v:
        v = "http://" + v
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(v)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError as e:
        raise ValueError(f"{clip(v)}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path:
        raise ValueError("give the server's address, e.g. http://127.0.0.1:8765 (several "
                         "replicas: their addresses separated by commas)")
    return v


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ORCH_", env_nested_delimiter="__",
                                      extra="forbid", validate_default=True, allow_inf_nan=False)

    home: Path = Field(Path("~/.orch"), description="where orch keeps its store, logs and local Ray")
    database_url: Optional[SecretStr] = Field(
        None, description="a PostgreSQL job store shared by a team, postgresql://user:password@"
                          "host:5432/db; unset: SQLite at HOME/orch.db")
    mode: Optional[Literal["local", "hybrid"]] = Field(
        None, description="local keeps every job on this machine; unset: local unless a "
                          "cluster or a cloud is configured")
    ray_address: Optional[str] = Field(None, description="on-prem Ray dashboard address, http://host:8265")
    ray_token_file: Optional[Path] = Field(None, description="the on-prem cluster's Ray auth token; "
                                                             "default ~/.ray/auth_token when it exists")
    s3_endpoint_url: Optional[str] = Field(
        None, description="an S3-compatible endpoint (MinIO, ...) for s3:// checkpoints and "
                          "artifacts; unset: AWS S3. Credentials come from boto3's own chain")
    cloud_storage: Optional[str] = Field(
        None, description="default checkpoint.storage for cloud jobs, s3://bucket/prefix; a "
                          "recovered spot job resumes from it")
    onprem_checkpoint_storage: Optional[str] = Field(
        None, description="default checkpoint.storage for on-prem jobs: a path every node "
                          "shares, or s3://bucket/prefix; unset: Ray's default on the cluster")
    clouds: Annotated[list[str], NoDecode] = Field(default_factory=list,
                                                   description="enabled SkyPilot clouds, e.g. runpod,lambda,aws")
    currency: str = "USD"
    currency_rate: float = Field(1.0, gt=0, description="units of `currency` per 1 USD")
    electricity_price: float = Field(0.15, ge=0, description="USD per kWh")
    onprem: list[OwnedGpus] = Field(default_factory=list)
    local: LocalMachine = Field(default_factory=LocalMachine)
    steady_min_runs: int = Field(3, ge=1, description="K: runs of one fingerprint that make it steady")
    steady_window_days: float = Field(14, gt=0, description="W: the window those runs count in")
    steady_min_gap_hours: float = Field(12, ge=0, description="runs closer together than this "
                                        "count once towards K: a sweep's repeats are one occasion")
    short_job_hours: float = Field(2.0, gt=0, description="expected hours under which a job is short")
    max_wait_minutes: float = Field(60, ge=0, description="longest wait for on-prem before bursting")
    cloud_startup_minutes: float = Field(6, ge=0, description="billed provisioning time per launch")
    spot_preemptions_per_hour: float = Field(0.05, ge=0, le=10, description="how often a spot "
                                             "instance is expected to be taken back, per running "
                                             "hour: a checkpointing job on spot is priced with "
                                             "the rework and start-up each costs")
    spot_rework_minutes: float = Field(15, ge=0, le=1440, description="work redone after a "
                                       "preemption, on average (half the time between a job's "
                                       "checkpoints)")
    preemption_restarts: int = Field(10, ge=0, le=1000, description="times a job on owned "
                                     "hardware that exits 75 (the preemption contract) is run "
                                     "again before it is failed")
    cron_lookahead_hours: float = Field(24, gt=0, le=720, description="how far ahead placement "
                                        "sees the cron schedules due on owned GPUs (`orch serve`, "
                                        "`orch plan` and `orch simulate` alike)")
    exploratory_backfill: bool = Field(True, description="exploratory work may run on owned GPUs "
                                       "that are idle now and stay free for its whole run; off: "
                                       "exploratory work always rents")
    exploration_horizon_days: float = Field(30, ge=0, le=365, description="rent a GPU model whose "
        "speed for a job family is unmeasured, once, when what knowing it may save over this many "
        "days of the family's rented work beats the run's extra cost; 0: never (docs/simulate.md)")
    exploration_budget_share: float = Field(0.05, ge=0, le=1, description="an exploring run "
        "costs at most this share of its family's rent over exploration_horizon_days")
    exploratory_wait_minutes: Optional[float] = Field(
        None, ge=0, le=1440, description="exploratory work may wait this long for owned GPUs "
        "expected to free by then (renting takes the cloud's start-up anyway); default: "
        "cloud_startup_minutes (a job whose expected start passes is placed again)")
    telemetry_interval_seconds: float = Field(
        5.0, ge=0.1, le=3600, description="how often each training worker reads its device (a "
        "GPU through NVML, else its own CPU and memory) for the job's record")
    utilization_policy: Optional[UtilizationPolicy] = Field(
        None, description="the team's default for a train job's utilization_policy (a job's "
        "own key wins): {min_utilization, window_minutes, action: warn|stop}")
    telemetry_point_seconds: float = Field(
        30.0, ge=1, le=3600, description="a running job's live device figures (`orch status`, the "
        "status page, `orch serve`'s /metrics) are each worker's mean over this many seconds, "
        "one line per worker per period in its log; also the first grain of its stored series")
    turnaround_value_per_hour: float = Field(0.0, ge=0, description="what an hour sooner is "
                                             "worth to you, in `currency`: exploratory options "
                                             "rank by cost + this x (wait + run hours)")
    budget_basis: Literal["cash", "full"] = Field(
        "cash", description="what monthly_budget and budget.max_cost count: cash (cloud rental "
                            "and power) or full (owned hardware's amortized purchase too)")
    backend_retries: int = Field(3, ge=1, le=10, description="attempts at each call to Ray or "
                                 "SkyPilot before orch reports the backend as failing")
    backend_backoff_s: float = Field(0.5, ge=0, le=60, description="first wait between attempts; "
                                     "it doubles after each")
    backend_timeout_s: float = Field(60.0, gt=0, le=3600, description="longest wait for one call "
                                     "to Ray or SkyPilot (a launch: 5 times this)")
    monthly_budget: Optional[float] = Field(
        None, gt=0, description="spend per calendar month (UTC) over all jobs, in `currency`, "
                                "counted as budget_basis says (cash by default): plans over it "
                                "are refused and running jobs are stopped when it is reached")
    candidates: list[BuyCandidate] = Field(default_factory=list,
                                           description="GPUs you might buy, for `orch advise`")
    # `orch serve`, and the CLI as its client.
    server: Optional[str] = Field(None, description="an `orch serve` URL, http://host:8765 (or "
                                  "http://TOKEN@host:8765), or several replicas' separated by "
                                  "commas (tried in turn when one does not answer): submit, plan, "
                                  "status, logs, cancel and cost then talk to it; unset: orch "
                                  "works alone")
    token: Optional[SecretStr] = Field(None, description="the API token for `server` (from `orch "
                                       "token create NAME` on the server)")
    server_retry_s: float = Field(30.0, ge=0, le=3600, description="how long a client tries "
                                  "a request again when `server` does not answer (a replica "
                                  "lost, a restart, the database restarting), moving to the "
                                  "next replica; at most 10 s while every try is refused")
    serve_host: str = Field("127.0.0.1", description="where `orch serve` listens; loopback by default")
    serve_port: int = Field(8765, ge=1, le=65535, description="`orch serve`'s port")
    serve_period_s: float = Field(15.0, gt=0, le=3600, description="`orch serve`'s scheduler "
                                  "period: cron slots, reconciling jobs, launching the queue")
    upload_max_mb: int = Field(100, ge=0, le=100_000, description="the largest workdir the CLI "
                               "sends to `orch serve` with a job, and the server accepts, in MiB "
                               "(its files' total); 0: never send one, the server must see the "
                               "job's paths (a shared filesystem)")
    secret_key_file: Optional[Path] = Field(None, description="the key the digests of jobs' "
                                            "secret values are made with (log redaction); "
                                            "default HOME/secret_key. Replicas of orch serve "
                                            "on one store must share one: give each a copy")
    upload_keep_hours: float = Field(24.0, ge=0, le=100_000, description="`orch serve` removes "
                                     "an uploaded workdir no schedule and no unfinished job "
                                     "needs once it is unused for this long (a resubmit of the "
                                     "same files within it sends nothing); 0: never remove one")

    # What `orch serve` lets a client's job reach on the server (docs/security.md).
    serve_git_schemes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["https"], description="the URL schemes a client's "
        "workdir.url may use on `orch serve` (https, ssh, git); file:// and local paths never")
    serve_git_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["github.com", "gitlab.com", "bitbucket.org"],
        description="the hosts (host or host:port) a client's workdir.url may name on "
                    "`orch serve`; * allows any")
    serve_git_timeout_s: float = Field(20.0, gt=0, le=600, description="longest time `orch "
                                       "serve` waits for one git command run for a client")
    serve_git_per_user: int = Field(2, ge=1, le=100, description="git commands one user's "
                                    "requests may have running at once on `orch serve`; more "
                                    "are refused at once (HTTP 429)")
    serve_git_max: int = Field(8, ge=1, le=100, description="git commands all users' requests "
                               "may have running at once on `orch serve`")
    serve_workdir_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list, description="folders on the server a client's job may name as "
        "its workdir or job file (a shared filesystem); none: a client's workdir is an upload "
        "or a git URL")
    serve_env_secrets: dict[str, list[str]] = Field(
        default_factory=dict, description="the `secrets: {NAME: null}` names `orch serve` "
        "fills from its own environment, by user (\"*\": every user), e.g. {\"*\": "
        "[\"HF_TOKEN\"], \"alice\": [\"WANDB_API_KEY\"]}; none: no name")
    serve_local_trusted: bool = Field(
        False, description="`orch serve` runs clients' jobs on its own machine (the `local` "
        "target), as its own user, which can read its home and store: only for a team that "
        "trusts each other with all of it; false: a job bound for `local` is refused")
    serve_isolation: Literal["shared", "per-user"] = Field(
        "shared", description="how `orch serve` runs clients' jobs on its own machine (the "
        "`local` target): shared, one Ray instance as the server's user (the trusted-team "
        "mode, needs serve_local_trusted); per-user, each client user's jobs in a Ray "
        "instance of their own, as an OS user of their own (needs root)")
    onprem_isolation: Literal["shared", "per-user"] = Field(
        "shared", description="how clients' jobs share the on-prem cluster: shared, one Ray "
        "cluster, one OS user, one token (the trusted-team mode); per-user, each owner's jobs "
        "in a Ray cluster of their own on the owned nodes, as an OS user of their own, started "
        "through the base cluster (which must run as root)")
    serve_isolation_root: Path = Field(
        Path("/var/lib/orch-u"), description="per-user mode: the folder holding each OS "
        "user's home (its Ray's temp dir, its jobs' HOME); short, since Ray's sockets live "
        "below it")
    serve_job_users: dict[str, str] = Field(
        default_factory=dict, description="per-user mode: the OS user a client user's jobs "
        "run as, by token name; unnamed users run as orch-u-<name>, which orch makes")
    serve_isolation_python: Optional[Path] = Field(
        None, description="per-user mode: the Python its users' Ray and jobs' runner run "
        "under, with orch and Ray importable; every job user must be able to run it (none: "
        "orch's own, so install orch outside a folder only root can enter)")
    serve_isolation_idle_s: float = Field(
        600.0, ge=0, le=86_400, description="per-user mode: a user's Ray instance that ran "
        "nothing for this long is stopped (its next job starts it again)")
    serve_queued_per_user: int = Field(100, ge=0, le=1_000_000, description="jobs one user "
                                       "may have queued on `orch serve` at once; more are "
                                       "refused (HTTP 429) until some launch; 0: no limit")
    upload_quota_mb: int = Field(1000, ge=0, le=1_000_000, description="the unpacked uploads "
                                 "one user may hold on `orch serve` at once, in MiB; 0: no limit")
    serve_header_timeout_s: float = Field(10.0, gt=0, le=3600, description="longest time "
                                          "`orch serve` waits for a request's headers to end; "
                                          "then it closes the connection")
    serve_body_timeout_s: float = Field(30.0, gt=0, le=3600, description="longest pause "
                                        "`orch serve` waits for the next piece of a request body")
    metrics_token: Optional[SecretStr] = Field(
        None, description="a read-only token for `orch serve`'s /metrics alone (what Prometheus "
        "holds): at least 32 characters, e.g. `openssl rand -hex 32`; /metrics takes any API "
        "token too, the rest of the API never this one")

    @field_validator("metrics_token", mode="before")
    @classmethod
    def _metrics_token(cls, v: Any) -> Any:
        text = v.get_secret_value() if isinstance(v, SecretStr) else v
        if text is None or (isinstance(text, str) and not text.strip()):
            return None
        if not isinstance(text, str):
            raise ValueError("give the token as a string")
        # Its value is never shown: only what is wrong with it.
        if len(text) < 32 or not all(33 <= ord(c) < 127 for c in text):
            raise ValueError(f"a token of {len(text)} characters: give at least 32 printable "
                             "ASCII characters without spaces, e.g. from `openssl rand -hex 32`")
        return text

    @field_validator("serve_git_schemes", "serve_git_hosts", mode="before")
    @classmethod
    def _lower_list(cls, v: Any) -> Any:
        v = _split_list(v)
        if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
            raise ValueError(f"{clip(v)}: write a list of names, e.g. [\"https\"]")
        return [c.lower() for c in v]

    @field_validator("serve_workdir_roots", mode="before")
    @classmethod
    def _roots(cls, v: Any) -> Any:
        v = _split_list(v)
        if not isinstance(v, list):
            raise ValueError(f"{clip(v)}: write a list of absolute folders")
        out = []
        for p in v:
            path = Path(os.path.expanduser(str(p)))
            if "\x00" in str(p) or not path.is_absolute():
                raise ValueError(f"{clip(p)}: give an absolute folder")
            out.append(path)
        return out

    @field_validator("server", mode="before")
    @classmethod
    def _server(cls, v: Any) -> Any:
        """One URL (a server, or a load balancer before replicas), or several replicas'
        separated by commas; each checked, kept as one comma-separated text."""
        if not isinstance(v, str) or not v.strip():
            return None if isinstance(v, str) else v
        urls = [u.strip().rstrip("/") for u in v.split(",") if u.strip()]
        return ",".join(_server_url(u) for u in urls) or None

    @field_validator("database_url", mode="before")
    @classmethod
    def _database_url(cls, v: Any) -> Any:
        text = v.get_secret_value() if isinstance(v, SecretStr) else v
        if not isinstance(text, str) or not text.strip():
            return None if isinstance(text, str) else v
        text = text.strip()
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(text)
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError as e:
            raise ValueError(f"not a database URL ({e})") from None
        if parts.scheme not in ("postgresql", "postgres"):  # the value may hold a password
            raise ValueError(f"a {parts.scheme or 'schemeless'} URL: give postgresql://user:"
                             "password@host:5432/dbname, or leave it unset for SQLite")
        return SecretStr(text)

    @model_validator(mode="after")
    def _token_in_url(self) -> Settings:
        """http://TOKEN@host:port: the token moves to `token`, so the URL shown has none."""
        if not self.server:
            return self
        urls = []
        for url in self.server.split(","):
            scheme, rest = url.split("://", 1)
            if "@" in rest:
                user, rest = rest.rsplit("@", 1)
                if self.token is None and user:
                    self.token = SecretStr(user.split(":", 1)[0])
            urls.append(f"{scheme}://{rest}")
        self.server = ",".join(urls)
        return self

    @field_validator("clouds", mode="before")
    @classmethod
    def _clouds(cls, v: Any) -> Any:
        v = _split_list(v)
        if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
            raise ValueError(f"{clip(v)}: write a list of cloud names, e.g. [\"runpod\", \"aws\"]")
        return [c.lower() for c in v]

    @field_validator("home", "ray_token_file", "catalog_dir", "secret_key_file")
    @classmethod
    def _no_nul(cls, v: Optional[Path]) -> Optional[Path]:
        if v is not None and "\x00" in str(v):
            raise ValueError("a path cannot contain a NUL character (\\0)")
        return v

    @field_validator("s3_endpoint_url", "cloud_storage", "onprem_checkpoint_storage", mode="before")
    @classmethod
    def _blank_is_unset(cls, v: Any) -> Any:
        return None if isinstance(v, str) and not v.strip() else v

    @field_validator("cloud_storage", "onprem_checkpoint_storage")
    @classmethod
    def _storage(cls, v: Optional[str], info: ValidationInfo) -> Optional[str]:
        # The rule checkpoint.storage follows; a cloud VM's own disk is gone with the VM.
        problem = None if v is None else storage_problem(v, local=info.field_name != "cloud_storage")
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("home")
    @classmethod
    def _home(cls, v: Path) -> Path:
        return Path(os.path.expanduser(str(v)))

    @field_validator("ray_token_file")
    @classmethod
    def _token_file(cls, v: Optional[Path]) -> Optional[Path]:
        return None if v is None else Path(os.path.expanduser(str(v)))

    @field_validator("ray_address")
    @classmethod
    def _address(cls, v: Optional[str]) -> Optional[str]:
        if v is None or not v.strip():
            return None
        v = v.strip().rstrip("/")
        if "://" not in v:
            v = "http://" + v  # host:8265 is what `ray start` prints
        if not v.startswith(("http://", "https://")):
            raise ValueError(f"{clip(v)}: give the Ray dashboard's HTTP address, e.g. http://10.0.0.10:8265")
        return v

    @property
    def effective_mode(self) -> str:
        if self.mode:
            return self.mode
        return "hybrid" if (self.ray_address or self.clouds) else "local"

    @property
    def exploratory_wait(self) -> float:
        """Minutes exploratory work may wait for owned GPUs: the setting, else the start-up."""
        given = self.exploratory_wait_minutes
        return self.cloud_startup_minutes if given is None else given

    # Where each value came from: filled in by load_settings().
    _sources: dict[str, str] = PrivateAttr(default_factory=dict)
    # Set by `orch serve` (cli/serve.py), never by a file or the environment: this process
    # acts for clients, so it runs no git in a folder one named or sent, and checks their git
    # URLs (service/git_workdir.serves_clients).
    _serves_clients: bool = PrivateAttr(False)

    def source_of(self, key: str) -> str:
        return self._sources.get(key, "default")

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings,
                                   dotenv_settings, file_secret_settings):
        # Explicit arguments (the TOML file's contents, or a test's) rank below the env.
        return (env_settings, init_settings)

    # Used by placement (orchestrator/decision, orchestrator/offers/catalog.py).
    catalog_dir: Optional[Path] = Field(None, description="SkyPilot price catalogs (<cloud>/vms.csv); "
                                                          "default SkyPilot's own ~/.sky/catalogs/v8")
    gpu_speeds: dict[str, float] = Field(default_factory=dict,
                                         description="relative GPU speeds (H100 = 1.0) to add or "
                                                     "override, e.g. {\"RTX4090\": 0.17}")
    default_job_hours: float = Field(1.0, gt=0, description="hours assumed on the job's first "
                                     "accelerator when neither history nor estimate.hours says")

    @field_validator("catalog_dir")
    @classmethod
    def _catalog_dir(cls, v: Optional[Path]) -> Optional[Path]:
        return None if v is None else Path(os.path.expanduser(str(v)))
