"""`orch config show`: the effective settings and where each one came from."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from orchestrator.cli.render import out, print_json


def config_show(json_out: bool = typer.Option(False, "--json", help="print the settings as JSON")) -> None:
    """Print every setting, its value, and its source (environment, file or default)."""
    from orchestrator.settings import Settings, config_path, load_settings

    settings = load_settings()
    values = settings.model_dump(mode="json")
    rows = [(name, values[name], settings.source_of(name)) for name in Settings.model_fields]
    if json_out:
        data = {"config_file": str(config_path()), "effective_mode": settings.effective_mode,
                "settings": {n: {"value": v, "source": s} for n, v, s in rows}}
        print_json(data)
        return
    out.print(f"config file: {escape(str(config_path()))}; effective mode: {settings.effective_mode}")
    t = Table()
    for col in ("setting", "value", "source"):
        t.add_column(col, overflow="fold")
    for name, value, source in rows:
        shown = value if isinstance(value, str) else json.dumps(value)
        t.add_row(name, escape(shown), source if source == "default" else f"[cyan]{escape(source)}[/]")
    out.print(t)
