"""Registers every command on the app; each command lives in its own short module."""

from orchestrator.cli import app
from orchestrator.cli.jobs import cancel, logs, status
from orchestrator.cli.local import local_app
from orchestrator.cli.submit import submit

app.command()(submit)
app.command()(status)
app.command()(logs)
app.command()(cancel)
app.add_typer(local_app, name="local")
