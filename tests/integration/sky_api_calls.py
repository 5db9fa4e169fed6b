"""orch's SkyPilot calls against the API server this process's environment names (run in a
process of its own by test_sky_api_server.py): every answer written as JSON to argv[1]."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
JOB = """\
name: offline
resources: {accelerators: H100:1}
train: {job: image-classification}
estimate: {hours: 1, gpu: H100}
checkpoint: {storage: "s3://bucket/ckpt"}
"""


def answer(fn, seconds: dict, name: str) -> dict:
    start = time.monotonic()
    try:
        value = fn()
    except Exception as e:  # each answer kept, so that the test sees all of them
        out = {"type": type(e).__name__, "message": getattr(e, "message", str(e)),
               "hint": getattr(e, "hint", None)}
        if hasattr(e, "cluster_status"):
            out["cluster_status"] = e.cluster_status and str(e.cluster_status)
        if type(e).__name__ == "CloudError":
            out["str"] = str(e)
        return out
    finally:
        seconds[name] = round(time.monotonic() - start, 2)  # for the test's report
    return {"value": dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value}


def main(out: Path, home: Path) -> None:
    import providers.cloud as cloud
    from orchestrator.records.placement import PlacedOffer
    from orchestrator.service.orch import Orch
    from orchestrator.settings import Settings
    from orchestrator.spec import load_spec_text
    from providers.base import Launch

    sdk = cloud.SkySDK()
    provider = cloud.CloudProvider(sdk=sdk)
    offer = PlacedOffer(target="cloud", cloud="lambda", region="us-east-1", gpu="H100", count=1, spot=False)
    task = cloud.build_task(Launch(job_id="orch-none", entrypoint="true", offers=(offer,)))
    seconds: dict[str, float] = {}
    calls = {
        # SkyPilot's own answers, as the fake (tests/fake_sky.py) replays them
        "sdk.queue": lambda: sdk.queue("orch-none"),
        "sdk.logs": lambda: sdk.logs("orch-none"),
        "sdk.cancel": lambda: sdk.cancel("orch-none"),
        "sdk.request": lambda: list(sdk.request("no-such-request")),
        "sdk.launch": lambda: sdk.launch(task, "orch-none"),
        # orch's, through the provider
        "state": lambda: provider.state("orch-none"),
        "state.request": lambda: provider.state("orch-none", {"sky_request_id": "no-such-request"}),
        "logs": lambda: provider.logs("orch-none"),
        "cancel": lambda: provider.cancel("orch-none"),
    }
    got = {name: answer(fn, seconds, name) for name, fn in calls.items()}
    # A cloud job submitted through the service: only the clouds' credential check is
    # pretended, so that orch places it in the cloud and SkyPilot is asked to launch it.
    cloud.enabled_clouds = lambda clouds: (list(clouds), {})
    orch = Orch(Settings(home=home, mode="hybrid", clouds=["lambda", "runpod", "aws"],
                         catalog_dir=ROOT / "examples" / "catalog", backend_retries=1))
    got["submit"] = answer(lambda: orch.submit(load_spec_text(JOB, "offline.yaml")).rec.id,
                           seconds, "submit")
    got["records"] = [{"status": r.status, "message": r.message, "placed_on": r.placed_on}
                      for r in orch.core.store.list()]
    got["seconds"] = seconds
    out.write_text(json.dumps(got, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
