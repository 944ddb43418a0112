"""``examples/`` work against the demo site as they are (issue 14): each targets file is imported into a
fresh config DB, every target is run now, and ``crawlherd run --until-idle`` crawls a demo site started
here; the items stored are exactly what the site lists for those searches. The files are not edited:
the site's address reaches them through ``DEMO_URL`` (their ``${DEMO_URL:-http://127.0.0.1:8080}``),
as the README tells a user whose demo site is not on port 8080."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawlherd.demo import DemoSite
from crawlherd.demo.targets import expected_results
from tests.support.cli import crawlherd, invoke

pytestmark = pytest.mark.timeout(240)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def document(path: Path, url: str) -> dict[str, Any]:
    """The example as a targets document, its ``${DEMO_URL:-...}`` pointed at ``url`` (the oracle's
    copy; crawlherd expands the file itself)."""
    text = path.read_text(encoding="utf-8").replace("${DEMO_URL:-http://127.0.0.1:8080}", url)
    data: dict[str, Any] = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    return data


def test_every_example_file_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.iterdir()) == ["targets.toml", "targets.yaml"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["targets.toml", "targets.yaml"])
async def test_example_crawls_the_demo_site(name: str, tmp_path: Path) -> None:
    async with DemoSite() as site:  # one /search page in four answers 429 first: the example must cope
        env = {"DEMO_URL": site.url, "CRAWLHERD_DATABASE_URL": f"sqlite:///{tmp_path}/example.db"}
        code, out, err = await invoke("targets", "import", str(EXAMPLES / name), env=env, cwd=tmp_path)
        assert code == 0, err
        code, out, err = await invoke("targets", "list", "--json", env=env, cwd=tmp_path)
        ids = [str(t["id"]) for t in json.loads(out)]
        assert ids, out
        code, out, err = await invoke("targets", "run", *ids, env=env, cwd=tmp_path)
        assert code == 0 and out.count("run queued") == len(ids), out + err
        code, out, err = await crawlherd(
            "run", "--until-idle", "--no-web", "--allow-private", "--json", env=env, cwd=tmp_path, timeout=200
        )
        assert code == 0, err
        stats = json.loads(out)
        assert stats["jobs/succeeded"] == len(ids) and stats["jobs/dead"] == 0, stats
        code, out, err = await invoke("items", "export", env=env, cwd=tmp_path)
        assert code == 0, err
        stored: dict[str, dict[str, dict[str, Any]]] = {}
        for line in out.splitlines():
            item = json.loads(line)
            fields = {k: v for k, v in item.items()
                      if k not in ("website", "url", "fingerprint", "first_seen", "last_seen")}
            stored.setdefault(item["website"], {})[item["fingerprint"]] = {"url": item["url"], "fields": fields}
        expected = expected_results(site, document(EXAMPLES / name, site.url))
        assert stored == expected
        assert all(stored.values())  # every website of the example found items
