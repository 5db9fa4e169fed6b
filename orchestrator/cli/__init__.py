"""The `orch` command line: parse, call one function, render. No SDK imports at start-up."""

from __future__ import annotations

import sys


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

    from orchestrator.base.errors import OrchError
    from orchestrator.cli.commands import app
    from orchestrator.cli.render import err

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


def run() -> None:
    """The `orch` command: `main`, then out without the interpreter's teardown once the
    work is done and said. The teardown unloads every module object by object (Ray's job
    client, pydantic, rich): 1-1.5 s on 2 cores after `orch submit` has printed its last
    line. Exit handlers still run and output is flushed; a thread still at work gets the
    usual wait. Tests call `main`, which raises SystemExit as any command line does."""
    try:
        main()
    except SystemExit as e:
        code = e.code
    else:
        code = 0
    leave(code)


def leave(code) -> None:
    """Exit with `code` (SystemExit's: None, a number, or a message for stderr and 1)."""
    import atexit
    import os
    import threading

    if not isinstance(code, int):
        if code is not None:
            print(code, file=sys.stderr)
        code = 0 if code is None else 1
    if any(t.is_alive() and not t.daemon and t is not threading.main_thread()
           for t in threading.enumerate()):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`orch status | head`): nothing to say
            code = code or 120  # what Python itself exits with when its flush fails
    os._exit(code)


if __name__ == "__main__":
    run()
