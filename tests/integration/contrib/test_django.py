"""crawlherd.contrib.django in a real Django project on the local PostgreSQL (a fresh database):

- the unmanaged models match crawlherd's SQLAlchemy models (tables, columns, types, nullability);
- the admin lists and edits targets (Django's test client), and crawlherd reads the edit;
- ``manage.py crawlherd_dispatch --once`` dispatches the due targets, ``manage.py crawlherd_worker`` takes them.

The project's settings are the test's base settings plus the block of docs/integrations.md that a user
adds to theirs. Django is configured once for this module (its settings are process-wide).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select
from sqlalchemy.dialects import postgresql

from crawlherd.brokers import open_broker
from crawlherd.db import Base, DispatchOutbox, JobRun, ScrapeTarget, create_engine, upgrade
from tests.support.db import add_targets, add_website, database_now, fresh_postgres_database
from tests.support.docblocks import doc_block

pytest.importorskip("django")
pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[3]

BASE_SETTINGS = """
import os
SECRET_KEY = "test-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "djsite.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request", "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages"]},
}]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": {
    "ENGINE": "django.db.backends.postgresql", "NAME": os.environ["DJSITE_DB_NAME"],
    "HOST": os.environ["DJSITE_DB_HOST"], "PORT": os.environ["DJSITE_DB_PORT"], "USER": os.environ["DJSITE_DB_USER"],
}}
"""

URLS = """
from django.contrib import admin
from django.urls import path
urlpatterns = [path("admin/", admin.site.urls)]
"""

MANAGE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djsite.settings")
from django.core.management import execute_from_command_line
execute_from_command_line(sys.argv)
"""


@pytest.fixture(scope="module")
def project(postgres_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, dict[str, str]]]:
    """(project dir, crawlherd database URL, environment) of a migrated Django project, set up in this process."""
    import django
    from django.core.management import call_command

    home = tmp_path_factory.mktemp("django")
    (home / "djsite").mkdir()
    (home / "djsite" / "__init__.py").write_text("")
    (home / "djsite" / "settings.py").write_text(BASE_SETTINGS + "\n" + doc_block("django-settings"))
    (home / "djsite" / "urls.py").write_text(URLS)
    (home / "manage.py").write_text(MANAGE)
    with fresh_postgres_database(postgres_url) as db_url:
        parts = urlsplit(db_url)
        env = {"DJSITE_DB_NAME": parts.path.lstrip("/"), "DJSITE_DB_HOST": parts.hostname or "127.0.0.1",
               "DJSITE_DB_PORT": str(parts.port or 5432), "DJSITE_DB_USER": parts.username or "postgres",
               "CRAWLHERD_BROKER_URL": f"sqlite:///{home / 'broker.db'}", "DJANGO_SETTINGS_MODULE": "djsite.settings"}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        sys.path.insert(0, str(home))
        try:
            asyncio.run(upgrade(db_url))  # crawlherd's schema: its Alembic migrations
            django.setup()
            from django.test.utils import setup_test_environment, teardown_test_environment

            setup_test_environment()  # the test client records template contexts
            call_command("migrate", verbosity=0)  # Django's own apps (auth, admin, sessions)
            yield home, db_url, env
        finally:
            from django.db import connections

            connections.close_all()
            teardown_test_environment()
            sys.path.remove(str(home))
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _normal(sql_type: str) -> str:
    t = sql_type.lower().strip()
    return {"float": "double precision"}.get(t, t)


def test_django_models_match_crawlherd_tables(project: Any) -> None:
    from django.apps import apps
    from django.db import connection

    dialect = postgresql.dialect()
    theirs = {
        table.name: {c.name: (_normal(c.type.compile(dialect=dialect)), bool(c.nullable)) for c in table.columns}
        for table in Base.metadata.sorted_tables
    }
    ours: dict[str, dict[str, tuple[str, bool]]] = {}
    for model in apps.get_app_config("crawlherd").get_models():
        if model._meta.proxy:
            continue
        assert model._meta.managed is False, f"{model.__name__} must be unmanaged: the schema is crawlherd's"
        ours[model._meta.db_table] = {
            f.column: (_normal(f.db_type(connection)), bool(f.null)) for f in model._meta.local_concrete_fields
        }
    # The tables the app maps (websites, targets, outbox, runs -- dead letters are runs -- and items),
    # each column for column; the console's own tables (users, audit log, heartbeats...) are not
    # Django's business.
    assert sorted(ours) == ["dispatch_outbox", "items", "job_runs", "scrape_targets", "websites"]
    for table in ours:
        assert ours[table] == theirs[table], f"table {table}"


def test_admin_lists_and_edits_targets(project: Any) -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    _, db_url, _ = project
    (target_id,) = asyncio.run(_one_target(db_url, "python developer"))
    admin = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client = Client()
    client.force_login(admin)

    listing = client.get("/admin/crawlherd/scrapetarget/")
    assert listing.status_code == 200
    assert "python developer" in listing.content.decode()

    page = client.get(f"/admin/crawlherd/scrapetarget/{target_id}/change/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data: dict[str, Any] = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if hasattr(field, "fields") and isinstance(value, datetime):  # split date/time widgets
            utc = value.astimezone(UTC)
            data[f"{name}_0"], data[f"{name}_1"] = utc.strftime("%Y-%m-%d"), utc.strftime("%H:%M:%S")
        elif value is not None and value is not False:
            data[name] = getattr(value, "pk", value)
    data.update(keywords="rust developer", location="Berlin")
    data.pop("active", None)  # unticked
    saved = client.post(f"/admin/crawlherd/scrapetarget/{target_id}/change/", data)
    assert saved.status_code == 302, saved.content.decode()[:3000]

    row = asyncio.run(_target_row(db_url, target_id))
    assert (row.keywords, row.location, row.active) == ("rust developer", "Berlin", False)


@pytest.mark.slow
def test_manage_py_crawlherd_dispatch_once_then_crawlherd_worker(project: Any) -> None:
    home, db_url, env = project
    run_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(home), str(ROOT / "src"), str(ROOT)])}
    ids = asyncio.run(_due_targets(db_url, 3))
    run = subprocess.run([sys.executable, "manage.py", "crawlherd_dispatch", "--once"], cwd=home, env=run_env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "published 3" in run.stdout, run.stdout
    keys, pending = asyncio.run(_dispatched(db_url, env["CRAWLHERD_BROKER_URL"]))
    assert sorted(keys) == sorted(ids)
    assert pending == 3

    # The worker command takes the jobs. Their site (a closed loopback port; --allow-private lets the
    # worker try it -- without it the worker would give the jobs back untried) cannot be crawled: each
    # run is recorded as failed and retried later; SIGTERM stops it cleanly.
    worker = subprocess.Popen([sys.executable, "manage.py", "crawlherd_worker", "--backoff", "60", "--allow-private"],
                              cwd=home,
                              env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while sorted(asyncio.run(_failed_runs(db_url))) != sorted(ids):
            assert worker.poll() is None, worker.communicate()[0]
            assert time.monotonic() < deadline, "the worker did not record the three runs"
            time.sleep(0.3)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=60)
    assert worker.returncode == 0, out
    assert "worker stopped" in out, out


async def _one_target(db_url: str, keywords: str) -> list[int]:
    engine = create_engine(db_url)
    try:
        site = await add_website(engine, name=f"admin-{keywords.replace(' ', '-')}")
        now = await database_now(engine)
        return await add_targets(engine, site, 1, every=timedelta(hours=1), anchor=now + timedelta(hours=1),
                                 keyword_prefix=keywords)
    finally:
        await engine.dispose()


async def _target_row(db_url: str, target_id: int) -> Any:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            return (await conn.execute(select(ScrapeTarget.__table__).where(ScrapeTarget.id == target_id))).one()
    finally:
        await engine.dispose()


async def _due_targets(db_url: str, n: int) -> list[int]:
    engine = create_engine(db_url)
    try:
        site = await add_website(engine, name="dispatch-me", base_url="http://127.0.0.1:9",
                                 search_url_template="http://127.0.0.1:9/search?q={keywords}")
        now = await database_now(engine)
        return await add_targets(engine, site, n, every=timedelta(hours=1), anchor=now - timedelta(seconds=5))
    finally:
        await engine.dispose()


async def _failed_runs(db_url: str) -> list[int]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(JobRun.target_id).where(JobRun.status == "failed"))).all()
        return [r.target_id for r in rows]
    finally:
        await engine.dispose()


async def _dispatched(db_url: str, broker_url: str) -> tuple[list[int], int]:
    engine = create_engine(db_url)
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(DispatchOutbox.target_id, DispatchOutbox.status))).all()
        assert {r.status for r in rows} == {"published"}
        async with open_broker(broker_url) as broker:
            pending = await broker.pending()
        return [r.target_id for r in rows], pending
    finally:
        await engine.dispose()
