"""`orch token create / list / revoke`: the API tokens `orch serve` accepts, in the store."""

from __future__ import annotations

import typer

from orchestrator.cli.render import err, local_only, out, print_json, table

token_app = typer.Typer(no_args_is_help=True, help="API tokens for `orch serve` (kept hashed "
                        "in the store; these commands write it directly).")


def _store():
    from orchestrator.settings import load_settings

    local_only("token", "this machine's store (run it where `orch serve` runs)")
    from orchestrator.store import open_store

    return open_store(load_settings())


@token_app.command("create")
def create(name: str = typer.Argument(..., help="who the token is for; it owns the jobs it submits"),
           admin: bool = typer.Option(False, "--admin", help="may cancel anyone's jobs")) -> None:
    """Make a token and print it, once: the store keeps only its hash."""
    from orchestrator.base.errors import InputError
    from orchestrator.server.auth import check_name, new_token

    problem = check_name(name)
    if problem:
        raise InputError(f"token name {name!r}: {problem}")
    token, digest = new_token()
    _store().add_token(name, digest, admin=admin)
    out.print(token, markup=False, highlight=False)
    err.print(f"token for {name}{' (admin)' if admin else ''}: shown once, orch keeps only its "
              "hash. Clients use it as ORCH_TOKEN=<token> with ORCH_SERVER=http://host:port.")


@token_app.command("list")
def list_(json_out: bool = typer.Option(False, "--json", help="JSON on stdout")) -> None:
    """Every token's name, role and dates (never the token)."""
    tokens = _store().tokens()
    if json_out:
        print_json(tokens)
        return
    if not tokens:
        out.print("no tokens yet: `orch token create NAME` makes one")
        return
    out.print(table(["NAME", "ROLE", "CREATED", "REVOKED"],
                    [(t["name"], "admin" if t["admin"] else "user", t["created_at"],
                      t["revoked_at"]) for t in tokens]))


@token_app.command("revoke")
def revoke(name: str = typer.Argument(..., help="the token's name")) -> None:
    """Stop accepting a token; its jobs keep running and keep their owner."""
    t = _store().revoke_token(name)
    out.print(f"revoked {t['name']} at {t['revoked_at']}: requests with its token now get 401")
