"""``crawlherd users``: the console's users (names and argon2 password hashes in the config DB)."""

from __future__ import annotations

import sys

import click

from crawlherd.cli._common import Output, database_option, output_options
from crawlherd.cli._console import on_db
from crawlherd.console.users import add_user, list_users, remove_user

__all__ = ["users"]


@click.group()
def users() -> None:
    """Console users. With none defined, `crawlherd web` serves 127.0.0.1 only, without login."""


@users.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (first line).")
@database_option
@output_options
@click.pass_context
def add_cmd(ctx: click.Context, name: str, password_stdin: bool, database_url: str | None, quiet: bool,
            as_json: bool) -> None:
    """Add user NAME (or set NAME's new password). The password is read from stdin or prompted for;
    never give it on the command line."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    on_db(ctx, database_url, lambda engine: add_user(engine, name, password, actor="cli"))
    Output(quiet=quiet, as_json=as_json).result(f"user {name} saved", {"name": name, "saved": True})


@users.command("list")
@database_option
@output_options
@click.pass_context
def list_cmd(ctx: click.Context, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Every user with the time of their last login."""
    rows = on_db(ctx, database_url, list_users, read_only=True)
    lines = [
        f"{name:20}  created {created:%Y-%m-%d %H:%M}  "
        + (f"last login {last:%Y-%m-%d %H:%M}" if last else "never logged in")
        for name, created, last in rows
    ]
    Output(quiet=quiet, as_json=as_json).result(
        "\n".join(lines) if rows else "no users: the console is open on 127.0.0.1 only",
        [{"name": n, "created_at": c, "last_login_at": last} for n, c, last in rows],
    )


@users.command("remove")
@click.argument("name")
@database_option
@output_options
@click.pass_context
def remove_cmd(ctx: click.Context, name: str, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Remove user NAME."""
    if not on_db(ctx, database_url, lambda engine: remove_user(engine, name, actor="cli")):
        raise click.ClickException(f"no user named {name!r}")
    Output(quiet=quiet, as_json=as_json).result(f"user {name} removed", {"name": name, "removed": True})
