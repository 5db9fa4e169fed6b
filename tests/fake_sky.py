"""A fake of SkyPilot's managed-jobs SDK boundary: replays scripted job records.

Only the cloud itself is faked: orch builds real `sky.Task` objects and hands them here.
Each `queue()` call returns the next record of the script (the last one repeats).
"""

from __future__ import annotations


class FakeSky:
    def __init__(self, script: list[dict], logs: str = "", request_status: str = "SUCCEEDED",
                 request_error: str | None = None, down_for: int = 0, slow_s: float = 0.0):
        self.down_for = down_for  # this many SDK calls fail first, as an API server that is down
        self.slow_s = slow_s  # each call takes this long, as an overloaded API server
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

    def launch(self, task, name: str) -> str:
        self._call()
        self.launched.append((task, name))
        return f"req-{len(self.launched)}"

    def request(self, request_id: str):
        return self.request_status, self.request_error

    def queue(self, name: str) -> list[dict]:
        self._call()
        if not self.launched or not self.script:
            return []
        self.step = min(self.step + 1, len(self.script) - 1)
        return [{"job_name": name, "job_id": 7, **self.script[self.step]}]

    def logs(self, name: str) -> str:
        return self._logs

    def cancel(self, name: str) -> None:
        self.cancelled.append(name)
        self.script = [{"status": "CANCELLED", "end_at": None}]
        self.step = -1
