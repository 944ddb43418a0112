"""crawlherd.contrib.django in a fresh Django project (``django-admin startproject``, SQLite, its own
processes), as a user adds it:

- ``manage.py makemigrations --check`` is clean: the app ships its migrations (a common CI step);
- the documented settings fragment runs on its own (it imports what it uses);
- ``manage.py crawlherd_worker`` takes every flag of ``crawlherd worker`` that configures the worker.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from crawlherd.cli.worker import worker as cli_worker
from tests.support.docblocks import doc_block

pytest.importorskip("django")

ROOT = Path(__file__).resolve().parents[3]
#: The options of `crawlherd worker` that are not the worker's own (where it reads and writes, what it prints).
NOT_THE_WORKERS = {"--database-url", "--broker-url", "--metrics-port", "--quiet", "-q", "--json", "--help"}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    home = tmp_path_factory.mktemp("djfresh")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    subprocess.run([sys.executable, "-m", "django", "startproject", "djsite", str(home)], env=env, check=True,
                   timeout=120)
    with (home / "djsite" / "settings.py").open("a", encoding="utf-8") as settings:
        settings.write("\n" + doc_block("django-settings"))
    env["CRAWLHERD_BROKER_URL"] = f"sqlite:///{home / 'broker.db'}"
    return home, env


def manage(project: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    home, env = project
    return subprocess.run([sys.executable, "manage.py", *args], cwd=home, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_makemigrations_check_is_clean(project: tuple[Path, dict[str, str]]) -> None:
    done = manage(project, "makemigrations", "--check", "--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No changes detected" in done.stdout
    shown = manage(project, "showmigrations", "crawlherd")
    assert shown.returncode == 0 and "0001_initial" in shown.stdout, shown.stdout + shown.stderr


def test_the_settings_fragment_stands_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAWLHERD_BROKER_URL", "memory://")
    namespace: dict[str, object] = {"INSTALLED_APPS": ["django.contrib.admin"]}  # what settings.py has before it
    exec(compile(doc_block("django-settings"), "settings-fragment", "exec"), namespace)
    assert namespace["INSTALLED_APPS"] == ["django.contrib.admin", "crawlherd.contrib.django"]
    assert namespace["CRAWLHERD"] == {"broker_url": "memory://"}


@pytest.mark.slow
def test_crawlherd_worker_takes_the_clis_flags(project: tuple[Path, dict[str, str]]) -> None:
    wanted = {opt for p in cli_worker.params if isinstance(p, click.Option) for opt in p.opts} - NOT_THE_WORKERS
    assert {"--allow-private", "--concurrency", "--frontier-url"} <= wanted
    helped = manage(project, "crawlherd_worker", "--help")
    assert helped.returncode == 0, helped.stderr
    offered = set(re.findall(r"(--[a-z][a-z-]+)", helped.stdout))
    assert wanted <= offered, f"missing: {sorted(wanted - offered)}"
    refused = manage(project, "crawlherd_worker", "--concurrency", "0")
    assert refused.returncode != 0 and "--concurrency" in refused.stderr, refused.stderr
