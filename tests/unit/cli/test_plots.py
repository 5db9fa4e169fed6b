"""The PNG plots: files that open as images, labelled axes, one line per target or policy."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PIL import Image

from orchestrator.base.errors import InputError
from orchestrator.cli.plots import plot_policies, plot_spend


def opens_as_png(path) -> None:
    with Image.open(path) as im:
        im.verify()
    with Image.open(path) as im:
        assert im.format == "PNG" and im.size[0] > 0 and im.size[1] > 0


def labelled(ax) -> None:
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip()


def test_spend_plot_draws_cumulative_spend_per_target(tmp_path):
    rows = [{"day": "2025-02-01", "target": "cloud", "cost": 10.0},
            {"day": "2025-02-03", "target": "cloud", "cost": 5.0},
            {"day": "2025-02-01", "target": "onprem", "cost": 2.0},
            {"day": "2025-02-02", "target": "onprem", "cost": 2.5},
            {"day": "2025-02-02", "target": "local", "cost": 0.25},
            {"day": "2025-02-02", "target": "cloud", "cost": 1.0}]
    fig = plot_spend(rows, tmp_path / "spend.png", "KRW", rate=1000)
    opens_as_png(tmp_path / "spend.png")
    ax = fig.axes[0]
    labelled(ax)
    assert "KRW" in ax.get_ylabel()
    lines = {ln.get_label(): list(ln.get_ydata()) for ln in ax.lines}
    assert list(lines) == ["local", "onprem", "cloud"]  # one line per target, fixed order
    # Three days each; spend adds up in KRW (1,000 per USD).
    assert lines["cloud"] == [10000, 11000, 16000]
    assert lines["onprem"] == [2000, 4500, 4500]
    assert lines["local"] == [0, 250, 250]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["local", "onprem", "cloud"]


def test_policy_plot_has_a_line_and_a_marker_per_policy(tmp_path):
    result = {"currency": "USD", "currency_rate": 1.0, "policies": [
        {"name": "orch", "cash_total": 30.0, "exploratory_p95_wait_h": 0.1, "daily_cash": [10, 20]},
        {"name": "owned-only", "cash_total": 25.0, "exploratory_p95_wait_h": 2.0,
         "daily_cash": [5, 20]},
        {"name": "on-demand", "cash_total": 90.0, "exploratory_p95_wait_h": 0.1,
         "daily_cash": [40, 50]},
        {"name": "oracle", "cash_total": 24.0, "exploratory_p95_wait_h": None,
         "daily_cash": [4, 20]}]}
    fig = plot_policies(result, tmp_path / "sim.png")
    opens_as_png(tmp_path / "sim.png")
    left, right = fig.axes
    labelled(left)
    labelled(right)
    assert [ln.get_label() for ln in left.lines] == ["orch", "owned-only", "on-demand", "oracle"]
    assert list(left.lines[0].get_ydata()) == [0, 10, 30]
    assert len(right.collections) == 3  # a marker per policy; the bound is a line, not a point
    assert [tuple(c.get_offsets()[0]) for c in right.collections] == [(0.1, 30.0), (2.0, 25.0), (0.1, 90.0)]
    assert {t.get_text() for t in right.texts} == {"orch", "owned-only", "on-demand", "oracle (lower bound)"}


def test_plots_refuse_other_formats_and_missing_folders(tmp_path):
    with pytest.raises(InputError, match="plots are written as PNG"):
        plot_spend([], tmp_path / "spend.pdf")
    with pytest.raises(InputError, match="no folder"):
        plot_policies({"policies": []}, tmp_path / "nowhere" / "sim.png")
    assert not (tmp_path / "spend.pdf").exists()


def test_importing_the_module_does_not_import_matplotlib():
    code = "import sys, orchestrator.cli.plots; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
