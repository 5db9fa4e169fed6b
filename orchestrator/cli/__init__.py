"""The `orch` command line: parse, call one function, render. No SDK imports at start-up."""

from __future__ import annotations

import sys

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="orch: run training jobs where they cost least - this workstation, "
                       "your Ray cluster, or the cheapest cloud GPU.")


def main() -> None:
    from orchestrator.cli import commands  # noqa: F401  (registers the commands)

    app(prog_name="orch")


if __name__ == "__main__":
    sys.exit(main())
