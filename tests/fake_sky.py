"""A fake of SkyPilot's managed-jobs SDK boundary: replays scripted job records.

Only the cloud itself is faked: orch builds real `sky.Task` objects and hands them here.
Each `queue()` call returns the next record of the script (the last one repeats). Where
SkyPilot has no jobs controller, the fake answers as SkyPilot 0.14.1's own API server did
(tests/integration/test_sky_api_server.py checks these answers against a real one).
"""

from __future__ import annotations

import json
from typing import Optional

from jobs import events
from jobs.events import KEY_VAR

# queue_v2 and cancel with no jobs controller: sky.exceptions.ClusterNotUpError, this message.
NO_JOBS = "No in-progress managed jobs."
# cancel with a stopped controller (read in sky/jobs/server/core.py, not seen on a live server).
ALL_FINISHED = "All managed jobs should have finished."
# A launch with no network and no cached catalog: sky.exceptions.CloudError, raised by the
# client while it validates the task; its str() is "requests error (ConnectionError): " and
# this (the URL names the catalog file).
CATALOG_OFFLINE = (
    "HTTPSConnectionPool(host='raw.githubusercontent.com', "
    "port=443): Max retries exceeded with url: /skypilot-org/skypilot-catalog/master/catalogs/"
    "v8/common/accelerators.csv (Caused by NameResolutionError(\"HTTPSConnection(host="
    "'raw.githubusercontent.com', port=443): Failed to resolve 'raw.githubusercontent.com' "
    "([Errno -2] Name or service not known)\"))")


def signed(text: str, key: str) -> str:
    """`text` with its state events signed with `key`, as orch's runner prints them."""
    lines = []
    for line in text.split("\n"):
        event = events.parse_line(line)
        if line.startswith(events.MARKER) and event and event["event"] in events.STATE_EVENTS:
            event[events.SIG] = events.signature(event, key)
            line = events.MARKER + json.dumps(event)
        lines.append(line)
    return "\n".join(lines)


def not_up(message: str = NO_JOBS, status: Optional[str] = None) -> Exception:
    from sky import exceptions
    from sky.utils import status_lib

    return exceptions.ClusterNotUpError(
        message, cluster_status=status_lib.ClusterStatus(status) if status else None)


def catalog_offline() -> Exception:
    from sky import exceptions

    return exceptions.CloudError(CATALOG_OFFLINE, cloud_provider="requests",
                                 error_type="ConnectionError")


class FakeSky:
    def __init__(self, script: list[dict], logs: str = "", request_status: str = "SUCCEEDED",
                 request_error: str | None = None, down_for: int = 0, slow_s: float = 0.0,
                 controller: Optional[str] = None, launch_error: Optional[Exception] = None):
        self.down_for = down_for  # this many SDK calls fail first, as an API server that is down
        self.slow_s = slow_s  # each call takes this long, as an overloaded API server
        # SkyPilot's jobs controller: None, none yet (the first launch provisions it); "UP";
        # "STOPPED" (it stops itself once no job is left in progress).
        self.controller = controller
        self.launch_error = launch_error  # what `launch` raises instead of returning a request
        self.calls = 0
        self.script = list(script)
        self.step = -1
        self.launched: list = []  # (task, name)
        self.cancelled: list[str] = []
        self._logs = logs
        self.request_status, self.request_error = request_status, request_error

    def _call(self) -> None:
        self.calls += 1
        if self.slow_s:
            import time

            time.sleep(self.slow_s)
        if self.calls <= self.down_for:
            raise ConnectionError("Could not connect to SkyPilot API server at http://127.0.0.1:46580")

    def _controller_up(self) -> None:
        if self.controller == "STOPPED":
            raise not_up(NO_JOBS, "STOPPED")
        if self.controller is None and not self.launched:
            raise not_up()

    def launch(self, task, name: str) -> str:
        self._call()
        if self.launch_error is not None:
            raise self.launch_error
        self.launched.append((task, name))
        return f"req-{len(self.launched)}"

    def request(self, request_id: str):
        return self.request_status, self.request_error

    def queue(self, name: str) -> list[dict]:
        self._call()
        self._controller_up()
        if not self.launched or not self.script:
            return []
        self.step = min(self.step + 1, len(self.script) - 1)
        return [{"job_name": name, "job_id": 7, **self.script[self.step]}]

    def logs(self, name: str) -> str:
        # SkyPilot's client answers "" where the server failed (no controller, no such job).
        if not self.launched:
            return ""
        # orch's runner signs its state events with the job's event key, one of its secrets.
        secret = (getattr(self.launched[-1][0], "secrets", None) or {}).get(KEY_VAR)
        key = secret.get_secret_value() if hasattr(secret, "get_secret_value") else secret
        return signed(self._logs, key) if key else self._logs

    def cancel(self, name: str) -> None:
        if self.controller == "STOPPED":
            raise not_up(ALL_FINISHED, "STOPPED")
        if self.controller is None and not self.launched:
            raise not_up()
        self.cancelled.append(name)
        self.script = [{"status": "CANCELLED", "end_at": None}]
        self.step = -1
