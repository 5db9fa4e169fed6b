"""The cache of what orch reads from the installed SkyPilot (orchestrator/base/skycache.py)."""

from __future__ import annotations

import importlib.metadata

from orchestrator.base import skycache


def test_the_skypilot_version_is_read_once_a_process(monkeypatch, tmp_path):
    # Each file's name holds the version, and importlib parses the package's METADATA on
    # every call (14 ms here): a plan named six files, a store test of 200 plans 1,200.
    calls = []
    real = importlib.metadata.version

    def counted(name):
        calls.append(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "version", counted)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    forget = getattr(skycache.sky_version, "cache_clear", lambda: None)
    forget()
    try:
        names = {skycache.path(n).name for n in ("schema", "clouds", "offers-aws")}
        skycache.write("clouds", ["aws"])
        assert skycache.read("clouds") == ["aws"]
    finally:
        forget()
    assert calls == ["skypilot"]
    assert all(n.startswith(f"skypilot-{real('skypilot')}-") for n in names), names
