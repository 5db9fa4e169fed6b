"""The `orch` command line: parse, call one function, render. No SDK imports at start-up."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="orch: run training jobs where they cost least - this workstation, "
                       "your Ray cluster, or the cheapest cloud GPU.")


def _click_errors():
    """click's exception classes, and typer's own copies of them (typer >= 0.16 vendors click)."""
    import click

    mods = [click.exceptions]
    try:
        import typer._click.exceptions as vendored  # noqa: PLC0415

        mods.append(vendored)
    except ImportError:
        pass
    pick = lambda name: tuple(getattr(m, name) for m in mods if hasattr(m, name))  # noqa: E731
    return pick("Exit"), pick("Abort"), pick("ClickException")


def main() -> None:

    from rich.markup import escape

    from orchestrator.cli import commands  # noqa: F401  (registers the commands)
    from orchestrator.cli.render import err
    from orchestrator.errors import OrchError

    exit_, abort, click_error = _click_errors()
    try:
        code = app(prog_name="orch", standalone_mode=False)
        # Without standalone mode, click returns typer.Exit's code instead of exiting.
        sys.exit(code if isinstance(code, int) else 0)
    except OrchError as e:
        err.print(f"[red]error:[/] {escape(e.message)}", highlight=False)
        if e.hint:
            err.print(f"  [dim]->[/] {escape(e.hint)}", highlight=False)
        sys.exit(e.exit_code)
    except exit_ as e:
        sys.exit(e.exit_code)
    except abort:
        err.print("aborted")
        sys.exit(130)
    except click_error as e:
        e.show()
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
