"""The `orch` app with every command on it; each command lives in its own short module."""

import typer

from orchestrator.cli.advise import advise
from orchestrator.cli.artifacts import artifacts
from orchestrator.cli.cluster import cluster_app
from orchestrator.cli.config_cmd import config_show
from orchestrator.cli.cost import cost
from orchestrator.cli.doctor import doctor
from orchestrator.cli.jobs import cancel, logs, status
from orchestrator.cli.local import local_app
from orchestrator.cli.plan import plan
from orchestrator.cli.schedule import schedule_app
from orchestrator.cli.serve import serve
from orchestrator.cli.simulate import simulate
from orchestrator.cli.submit import submit
from orchestrator.cli.token import token_app

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="orch: run training jobs where they cost least - this workstation, "
                       "your Ray cluster, or the cheapest cloud GPU.")
config_app = typer.Typer(no_args_is_help=True, help="Show orch's settings.")
config_app.command("show")(config_show)

app.command()(submit)
app.command()(plan)
app.command()(simulate)
app.command()(status)
app.command()(logs)
app.command()(cancel)
app.command()(artifacts)
app.command()(cost)
app.command()(advise)
app.command()(doctor)
app.command()(serve)
app.add_typer(local_app, name="local")
app.add_typer(cluster_app, name="cluster")
app.add_typer(config_app, name="config")
app.add_typer(token_app, name="token")
app.add_typer(schedule_app, name="schedule")
