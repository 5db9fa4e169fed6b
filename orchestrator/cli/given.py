"""The --env, --env-file and --secret options `orch submit` and `orch plan` share."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

ENV = typer.Option([], "--env", help="KEY=VALUE over the job file's envs (repeatable); "
                   "--env KEY takes this shell's value, as with `sky launch --env`")
ENV_FILE = typer.Option(None, "--env-file", help="a file of KEY=VALUE lines, read before "
                        "the --env values")
SECRET = typer.Option([], "--secret", help="KEY=VALUE over the job file's secrets "
                      "(repeatable; --secret KEY takes this shell's value); never stored")


def given(env: list[str], env_file: Optional[Path], secret: list[str]):
    """The command line's values, as the job file loader takes them."""
    from orchestrator.spec import overrides

    return overrides(env, env_file, secret)
