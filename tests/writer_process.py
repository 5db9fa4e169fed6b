"""One of several processes writing one store at once: plans, submits and follows N cloud
jobs (the cloud behind the replaying fake). Run by tests/unit/offers/test_many_writers.py."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import providers.cloud  # noqa: E402
from orchestrator.service import planning  # noqa: E402
from orchestrator.service.fingerprint import fingerprint  # noqa: E402
from orchestrator.service.orch import Orch  # noqa: E402
from orchestrator.settings import Settings  # noqa: E402
from orchestrator.spec import load_spec_text  # noqa: E402
from providers.cloud import CloudProvider  # noqa: E402
from tests.fake_sky import FakeSky  # noqa: E402

JOB = ("name: w{w}-{j}\nresources: {{accelerators: H100:1}}\n"
       "train: {{job: image-classification}}\nestimate: {{hours: 1}}\n")
WHERE = {"cloud": "runpod", "region": "US", "resources": "1x runpod({'H100': 1})"}


def main(home: str, writer: int, jobs: int) -> None:
    providers.cloud.enabled_clouds = lambda clouds: (list(clouds), {})  # no credentials here
    settings = Settings(home=Path(home), mode="hybrid", clouds=["lambda", "runpod", "aws"],
                        catalog_dir=ROOT / "examples" / "catalog")
    orch = Orch(settings)
    for j in range(jobs):
        spec = load_spec_text(JOB.format(w=writer, j=j), f"w{writer}-{j}.yaml")
        fp, _ = fingerprint(spec)
        planning.plan(spec, settings, fingerprint=fp)  # reads this job's history and the month
        fake = FakeSky([{"status": "RUNNING", "start_at": 1.0, **WHERE},
                        {"status": "SUCCEEDED", "start_at": 1.0, "end_at": 61.0, **WHERE}])
        orch.core.providers["cloud"] = CloudProvider(sdk=fake, startup_minutes=6)
        rec = orch.submit(spec, idempotency_key=f"w{writer}-{j}").rec
        for _ in range(2):
            rec = orch.refresh(orch.get(rec.id))
        assert rec.status == "SUCCEEDED", rec
    print("ok", writer)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
