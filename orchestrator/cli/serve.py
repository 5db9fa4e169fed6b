"""`orch serve`: the scheduler, the REST API and the status page, in one long-running process."""

from __future__ import annotations

from typing import Optional

import typer

from orchestrator.cli.render import err


def serve(
    host: Optional[str] = typer.Option(None, "--host", help="address to listen on (default "
                                       "serve_host, 127.0.0.1: this machine only)"),
    port: Optional[int] = typer.Option(None, "--port", help="port (default serve_port, 8765)"),
    period: Optional[float] = typer.Option(None, "--period", help="seconds between scheduler "
                                           "passes (default serve_period_s, 15)"),
    access_log: bool = typer.Option(False, "--access-log", help="log each request's method, "
                                    "path and status (never its headers, where the token is)"),
    now_offset_s: float = typer.Option(0.0, "--now-offset-s", hidden=True,
                                       help="tests: the scheduler's clock runs this far ahead"),
    clock_file: Optional[str] = typer.Option(None, "--clock-file", hidden=True,
                                             help="tests: a file of seconds the clock runs "
                                             "further ahead, read at each look (replicas "
                                             "moved ahead together)"),
) -> None:
    """Run orch as a service: cron schedules, a priority queue, every job kept in step with
    its backend, and the REST API (/v1, schema at /openapi.json) with a status page at /."""
    import ipaddress
    import logging
    import socket
    import time

    from orchestrator.base.errors import InputError, OrchError
    from orchestrator.server.replicas import check_key
    from orchestrator.settings import load_settings
    from orchestrator.store import database_url, open_store, pool, store_location
    from orchestrator.store.lease import FileLease

    settings = load_settings()
    settings._serves_clients = True  # its planning and launches treat clients' input as such
    host = host or settings.serve_host
    port = settings.serve_port if port is None else port
    if not 0 < port < 65536:
        raise InputError(f"--port {port}: not a TCP port", "give 1 to 65535")
    if period is not None and not 0 < period <= 3600:
        raise InputError(f"--period {period:g}: out of range", "give seconds, over 0 and at most 3600")
    open_store(settings).close()  # a damaged or unwritable store: one message, now
    check_key(settings)  # replicas share one secret key
    pool.enable()  # a request reuses a store another closed: no connect per request
    if not database_url(settings):  # a SQLite store has one server: a second is refused
        FileLease(settings.home / "orch.db").take()  # held until this process ends
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(info[0], socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(info[4])
    except OSError as e:
        raise OrchError(f"cannot listen on {host}:{port}: {e.strerror or e}",
                        "another `orch serve` may be running there; --port picks another port") from None

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")
    import uvicorn

    from orchestrator.server import header_timeout
    from orchestrator.server.app import create_app
    from orchestrator.server.scheduler import Scheduler

    def clock() -> float:
        return time.time() + now_offset_s + (_ahead(clock_file) if clock_file else 0.0)

    scheduler = Scheduler(settings, clock=clock, period_s=period)
    scheduler.url = f"http://{_shown(info)}:{sock.getsockname()[1]}"
    app = create_app(settings, scheduler)
    try:
        loopback = ipaddress.ip_address(info[4][0]).is_loopback
    except ValueError:
        loopback = False
    err.print(f"orch serve: {scheduler.url} (API at /v1, schema at "
              f"/openapi.json, status page at /#token=...), store {store_location(settings)}, "
              f"scheduler every {scheduler.period_s:g} s", highlight=False)
    if not loopback:
        err.print(f"[yellow]warning:[/] listening on {host}, beyond this machine: requests carry "
                  "tokens in plain HTTP; put a TLS proxy in front", highlight=False)
    # A client following a long job keeps its response open: on SIGTERM it gets 5 s to end.
    # A connection whose request headers do not all come within serve_header_timeout_s is
    # closed (server/header_timeout.py): uvicorn alone keeps a half-open one for good.
    config = uvicorn.Config(app, log_level="info" if access_log else "warning", access_log=access_log,
                            lifespan="on", http=header_timeout.protocol(
                                settings.serve_header_timeout_s),
                            timeout_graceful_shutdown=5)
    uvicorn.Server(config).run(sockets=[sock])


def _shown(info) -> str:
    """A listening address as a URL writes it (an IPv6 one in brackets)."""
    import socket

    return f"[{info[4][0]}]" if info[0] == socket.AF_INET6 else info[4][0]


def _ahead(path: str) -> float:
    """The seconds a test's clock file says (0 while it is missing or being written)."""
    try:
        with open(path) as f:
            return float(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0.0
