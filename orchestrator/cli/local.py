"""`orch local up|down|status`: the Ray instance that local-only mode runs jobs on."""

from __future__ import annotations

import typer

from orchestrator.cli.render import err, local_only, out, print_json

local_app = typer.Typer(no_args_is_help=True, help="Manage the local Ray instance (local-only mode).")


def _ray():
    local_only("local", "this machine's Ray instance")
    from orchestrator.service.orch import Orch
    from orchestrator.settings import load_settings

    return Orch(load_settings()).local_ray()


@local_app.command("up")
def up(json_out: bool = typer.Option(False, "--json")) -> None:
    """Start the local Ray instance, or reuse the running one."""
    ray = _ray()
    state = ray.up(on_start=lambda: err.print("[dim]starting the local Ray instance[/]"))
    if json_out:
        print_json(state)
    else:
        out.print(f"local Ray up at {state['dashboard_url']} ({state['cpus']} CPUs, files in {state['temp_dir']})")


@local_app.command("down")
def down() -> None:
    """Stop the local Ray instance (only its own processes), and in the per-user isolation
    mode every user's instance."""
    n = _ray().down()
    out.print(f"local Ray stopped ({n} processes)" if n else "local Ray was not running")
    from orchestrator.service.orch import Orch
    from orchestrator.settings import load_settings

    for name in Orch(load_settings()).stop_idle(everyone=True, only="local"):
        out.print(f"{name}'s Ray instance stopped")


@local_app.command("status")
def status(json_out: bool = typer.Option(False, "--json")) -> None:
    """Show whether the local Ray instance runs, and where."""
    state = _ray().status()
    if json_out:
        print_json(state or {"running": False})
        return
    if not state:
        out.print("local Ray is not running (`orch local up` or any `orch submit` starts it)")
        raise typer.Exit(1)
    out.print(f"local Ray running at {state['dashboard_url']}: {state['cpus']} CPUs, "
              f"{state['processes']} processes, files in {state['temp_dir']}; "
              f"runner host {state['runner_host']}")
