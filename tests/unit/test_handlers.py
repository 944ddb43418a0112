from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from crawlherd.errors import ConfigurationError
from crawlherd.extract import handlers as handlers_module
from crawlherd.extract.handlers import HandlerRegistry, register_handler, resolve_extractor, run_extractor
from crawlherd.extract.rules import ExtractionResult, ExtractionRules, Page
from crawlherd.item import make_item

PAGE = Page(url="https://x.test/list", html="<ul><li><a href='/a'>A</a></li></ul>", website="x")


def parse_x(page: Page) -> ExtractionResult:
    return ExtractionResult(items=[make_item(page.website, page.url + "#1", {"n": 1})])


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> HandlerRegistry:
    registry = HandlerRegistry()
    monkeypatch.setattr(handlers_module, "registry", registry)
    return registry


def _install_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry_points: str, module_source: str) -> None:
    """A real installed distribution (dist-info on sys.path) advertising crawlherd.handlers entry points."""
    dist = tmp_path / "fake_handlers-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-handlers\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    (tmp_path / "fake_site_handlers.py").write_text(textwrap.dedent(module_source))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "fake_site_handlers", raising=False)


def test_register_decorator_and_lookup(fresh_registry: HandlerRegistry) -> None:
    @register_handler("site-a")
    def handler(page: Page) -> ExtractionResult:
        return ExtractionResult(items=[])

    assert handlers_module.get_handler("site-a") is handler
    assert handlers_module.get_handler("unknown-site") is None
    assert "site-a" in fresh_registry.names()
    fresh_registry.register("site-a", handler)  # same one again: fine
    with pytest.raises(ConfigurationError, match="already registered for website 'site-a'"):
        fresh_registry.register("site-a", parse_x)
    fresh_registry.register("site-a", parse_x, replace=True)
    assert fresh_registry.get("site-a") is parse_x
    with pytest.raises(ConfigurationError, match="non-empty"):
        fresh_registry.register("", parse_x)


def test_entry_point_handlers_are_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_dist(
        tmp_path,
        monkeypatch,
        """
        [crawlherd.handlers]
        ep-site = fake_site_handlers:parse
        broken-site = fake_site_handlers:missing_function
        """,
        """
        from crawlherd.extract.rules import ExtractionResult
        from crawlherd.item import make_item

        def parse(page):
            return ExtractionResult(items=[make_item(page.website, page.url, {"from": "entry point"})])
        """,
    )
    registry = HandlerRegistry()
    assert {"ep-site", "broken-site"} <= set(registry.names())
    handler = registry.get("ep-site")
    assert handler is not None
    result = handler(Page(url="https://x.test/", html="", website="ep-site"))
    assert isinstance(result, ExtractionResult)
    assert result.items[0].fields == {"from": "entry point"}
    with pytest.raises(ConfigurationError, match="broken-site.*cannot be loaded"):
        registry.get("broken-site")
    # An in-process registration wins over the entry point of the same name.
    registry.register("ep-site", parse_x, replace=True)
    assert registry.get("ep-site") is parse_x


def test_resolve_extractor_prefers_handler_then_rules() -> None:
    registry = HandlerRegistry(group="crawlherd.handlers.none-here")
    rules = {"item_selector": "li", "item_url": "a"}
    extractor = resolve_extractor("x", rules, handlers=registry)
    assert isinstance(extractor, ExtractionRules)
    registry.register("x", parse_x)
    assert resolve_extractor("x", rules, handlers=registry) is parse_x
    with pytest.raises(ConfigurationError, match="'y' has no extraction rules and no handler"):
        resolve_extractor("y", None, handlers=registry)
    with pytest.raises(ConfigurationError, match="'y'"):
        resolve_extractor("y", {"item_selector": "li[["}, handlers=registry)


async def test_run_extractor_sync_async_and_bad_return() -> None:
    rules = ExtractionRules.from_mapping("x", {"item_selector": "li", "item_url": "a"})
    result = await run_extractor(rules, PAGE)
    assert [i.url for i in result.items] == ["https://x.test/a"]

    async def async_handler(page: Page) -> ExtractionResult:
        return parse_x(page)

    assert len((await run_extractor(async_handler, PAGE)).items) == 1

    def wrong(page: Page) -> list[str]:
        return ["not a result"]

    with pytest.raises(ConfigurationError, match="returned list, not ExtractionResult"):
        await run_extractor(wrong, PAGE)  # type: ignore[arg-type]
