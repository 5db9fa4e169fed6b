"""`orch artifacts ID`: list what a job saved under its checkpoint storage, and download it."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from orchestrator.cli.render import err, local_only, out, print_json, table


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def artifacts(
    job_id: str = typer.Argument(..., help="a job id (or a unique prefix)"),
    download: Optional[Path] = typer.Option(None, "--download", help="fetch everything listed "
                                            "into this folder, keeping the run's layout"),
    json_out: bool = typer.Option(False, "--json", help="JSON on stdout"),
    prefix: str = typer.Option("", "--prefix", help="only what lies under this prefix of the "
                               "run's folder, e.g. one checkpoint_... folder"),
) -> None:
    """List the checkpoints and files a job saved, and download them."""
    from orchestrator.service.orch import Orch

    local_only("artifacts", "this machine's store and checkpoint storage")
    from orchestrator.settings import load_settings
    from providers import artifacts as arts

    settings = load_settings()
    rec = Orch(settings).get(job_id)
    location = arts.run_location(rec.id, rec.info.storage_path, rec.info.run_name)
    source = arts.open_location(location, settings.s3_endpoint_url)
    items = source.list(prefix)
    result = {"id": rec.id, "location": location, "checkpoints": arts.checkpoint_dirs(items),
              "files": [{"key": i.key, "size": i.size} for i in items],
              "total_bytes": sum(i.size for i in items)}
    if not json_out:
        if not items:
            out.print(f"nothing saved under {escape(location)}{escape('/' + prefix) if prefix else ''}")
        else:
            out.print(f"[bold]{rec.id}[/] {escape(location)}: {len(items)} files, "
                      f"{_size(result['total_bytes'])}, {len(result['checkpoints'])} checkpoints")
            out.print(table(["KEY", "SIZE"], [(escape(i.key), _size(i.size)) for i in items]))
    if download is not None and items:
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn

        # Progress goes to stderr, so `--json` output on stdout stays parseable.
        with Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("downloading", total=result["total_bytes"] or None)
            arts.download(source, items, download,
                          lambda done, total, key: bar.update(task, completed=done,
                                                              description=escape(key)))
        result["downloaded_to"] = str(download.resolve())
        if not json_out:
            out.print(f"downloaded {len(items)} files to {escape(result['downloaded_to'])}")
    if json_out:
        print_json(result)
