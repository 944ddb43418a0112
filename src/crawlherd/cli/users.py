"""``crawlherd users``: the console's users (names, argon2 password hashes and roles in the config DB).

The CLI holds the config DB's credentials, which allow everything the console allows and more: it acts
as an admin, and its changes are audited as ``cli`` -- unless ``crawlherd --as USER`` says which user
acts (then only an admin may manage users, as in the console)."""

from __future__ import annotations

import sys

import click

from crawlherd.cli._common import Output, database_option, output_options
from crawlherd.cli._console import acting_as, on_db
from crawlherd.console.sessions import revoke_sessions
from crawlherd.console.users import Action, Role, add_user, list_users, remove_user, set_role

__all__ = ["users"]


@click.group()
def users() -> None:
    """Console users. With none defined, `crawlherd web` serves 127.0.0.1 only, without login."""


_ROLES = click.Choice([r.label for r in Role])


@users.command("add")
@click.argument("name")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input (first line).")
@click.option("--role", type=_ROLES, default=None,
              help="viewer (reads), operator (also runs, pauses, retries), admin (also edits, manages users). "
                   "Default for a new user: admin for the first one, viewer after; an existing user keeps theirs.")
@database_option
@output_options
@click.pass_context
def add_cmd(ctx: click.Context, name: str, password_stdin: bool, role: str | None, database_url: str | None,
            quiet: bool, as_json: bool) -> None:
    """Add user NAME (or set NAME's new password, which ends their open console sessions). The password
    is read from stdin or prompted for; never give it on the command line."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    wanted = Role.parse(role) if role else None
    got = on_db(ctx, database_url, lambda engine: add_user(engine, name, password, role=wanted, actor=acting_as(ctx)),
                action=Action.USERS)
    Output(quiet=quiet, as_json=as_json).result(
        f"user {name} saved ({got.label})", {"name": name, "role": got.label, "saved": True}
    )


@users.command("role")
@click.argument("name")
@click.argument("role", type=_ROLES)
@database_option
@output_options
@click.pass_context
def role_cmd(ctx: click.Context, name: str, role: str, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Give user NAME the role ROLE (the last admin stays admin)."""
    on_db(ctx, database_url, lambda engine: set_role(engine, name, Role.parse(role), actor=acting_as(ctx)),
          action=Action.USERS)
    Output(quiet=quiet, as_json=as_json).result(f"{name} is now {role}", {"name": name, "role": role})


@users.command("logout")
@click.argument("name")
@database_option
@output_options
@click.pass_context
def logout_cmd(ctx: click.Context, name: str, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """End every open console session of user NAME (they must log in again)."""
    ended = on_db(ctx, database_url, lambda engine: revoke_sessions(engine, name, actor=acting_as(ctx)),
                  action=Action.USERS)
    Output(quiet=quiet, as_json=as_json).result(f"{ended} session(s) of {name} ended", {"name": name, "ended": ended})


@users.command("list")
@database_option
@output_options
@click.pass_context
def list_cmd(ctx: click.Context, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Every user with their role, the time of their last login and their open console sessions."""
    rows = on_db(ctx, database_url, list_users, action=Action.USERS, read_only=True)
    lines = [
        f"{u.name:20}  {u.role.label:8}  created {u.created_at:%Y-%m-%d %H:%M}  "
        + (f"last login {u.last_login_at:%Y-%m-%d %H:%M}" if u.last_login_at else "never logged in")
        + f"  {u.sessions} session(s)"
        for u in rows
    ]
    Output(quiet=quiet, as_json=as_json).result(
        "\n".join(lines) if rows else "no users: the console is open on 127.0.0.1 only",
        [{"name": u.name, "role": u.role.label, "created_at": u.created_at, "last_login_at": u.last_login_at,
          "sessions": u.sessions} for u in rows],
    )


@users.command("remove")
@click.argument("name")
@database_option
@output_options
@click.pass_context
def remove_cmd(ctx: click.Context, name: str, database_url: str | None, quiet: bool, as_json: bool) -> None:
    """Remove user NAME (their open console sessions end with them)."""
    if not on_db(ctx, database_url, lambda engine: remove_user(engine, name, actor=acting_as(ctx)),
                 action=Action.USERS):
        raise click.ClickException(f"no user named {name!r}")
    Output(quiet=quiet, as_json=as_json).result(f"user {name} removed", {"name": name, "removed": True})
