"""A command that answers at once prints nothing more; one that waits says what it waits for
(orchestrator/cli/render.slow), on a terminal only."""

from __future__ import annotations

import io
import time

from rich.console import Console

from orchestrator.cli import render


def _terminal(monkeypatch) -> io.StringIO:
    buf = io.StringIO()
    monkeypatch.setattr(render, "err", Console(file=buf, force_terminal=True, width=100))
    return buf


def test_a_quick_answer_shows_nothing(monkeypatch):
    buf = _terminal(monkeypatch)
    with render.slow("checking jobs", after_s=0.5):
        pass
    time.sleep(0.6)  # the timer, had it not been stopped, would have fired by now
    assert buf.getvalue() == ""


def test_a_slow_answer_says_what_it_waits_for(monkeypatch):
    buf = _terminal(monkeypatch)
    with render.slow("checking jobs", after_s=0.05):
        time.sleep(0.4)
    assert "checking jobs" in buf.getvalue()


def test_piped_output_stays_clean(monkeypatch):
    buf = io.StringIO()
    monkeypatch.setattr(render, "err", Console(file=buf, force_terminal=False))
    with render.slow("checking jobs", after_s=0.0):
        time.sleep(0.2)
    assert buf.getvalue() == ""
