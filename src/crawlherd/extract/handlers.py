"""Python handlers for websites that declarative rules cannot read.

A handler takes a :class:`~crawlherd.extract.rules.Page` and returns an
:class:`~crawlherd.extract.rules.ExtractionResult` (or an awaitable of one). It is found by the
website's name, from two places:

- in-process registration: ``@register_handler("my-site")`` on a function;
- the entry-point group ``crawlherd.handlers`` of installed packages (``pyproject.toml``)::

      [project.entry-points."crawlherd.handlers"]
      my-site = "my_package.handlers:parse_my_site"

  loaded on first lookup; a broken entry point raises ConfigurationError naming it.

:func:`resolve_extractor` picks the handler when one is registered for the website, else the website's
declarative rules. Build items with :func:`~crawlherd.item.make_item` so their fingerprints
match the rules' ones.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, TypeVar

from crawlherd.errors import ConfigurationError
from crawlherd.extract.rules import ExtractionResult, ExtractionRules, Page
from crawlherd.extract.selectors import OFF_LOOP_CHARS

__all__ = [
    "ENTRY_POINT_GROUP",
    "Handler",
    "HandlerRegistry",
    "get_handler",
    "register_handler",
    "registry",
    "resolve_extractor",
    "run_extractor",
]

ENTRY_POINT_GROUP = "crawlherd.handlers"

Handler = Callable[[Page], ExtractionResult | Awaitable[ExtractionResult]]
H = TypeVar("H", bound=Callable[..., Any])


class HandlerRegistry:
    """Handlers by website name: registered in-process, or from the ``crawlherd.handlers`` entry points."""

    def __init__(self, *, group: str = ENTRY_POINT_GROUP) -> None:
        self.group = group
        self._handlers: dict[str, Handler] = {}
        self._entry_points: dict[str, Any] | None = None

    def register(self, name: str, handler: Handler, *, replace: bool = False) -> None:
        """Register ``handler`` for website ``name``; a second, different one raises unless ``replace``."""
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError(f"handler name must be a non-empty website name, got {name!r}")
        if not callable(handler):
            raise ConfigurationError(f"handler for {name!r} must be callable, got {handler!r}")
        existing = self._handlers.get(name)
        if existing is not None and existing is not handler and not replace:
            raise ConfigurationError(
                f"a handler is already registered for website {name!r} ({_describe(existing)}); "
                "pass replace=True to replace it"
            )
        self._handlers[name] = handler

    def _discover(self) -> dict[str, Any]:
        if self._entry_points is None:
            self._entry_points = {ep.name: ep for ep in entry_points(group=self.group)}
        return self._entry_points

    def get(self, name: str) -> Handler | None:
        """The handler for website ``name`` or None. In-process registrations win over entry points."""
        handler = self._handlers.get(name)
        if handler is not None:
            return handler
        ep = self._discover().get(name)
        if ep is None:
            return None
        try:
            loaded = ep.load()
        except Exception as exc:
            raise ConfigurationError(
                f"handler entry point {name!r} = {ep.value!r} (group {self.group!r}) cannot be loaded: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if not callable(loaded):
            raise ConfigurationError(f"handler entry point {name!r} = {ep.value!r} is not callable")
        self._handlers[name] = loaded
        return loaded  # type: ignore[no-any-return]

    def names(self) -> list[str]:
        """Every website name with a handler (registered or advertised by an entry point)."""
        return sorted(set(self._handlers) | set(self._discover()))

    def refresh(self) -> None:
        """Forget the entry points read so far (after installing a package at run time)."""
        self._entry_points = None


def _describe(handler: Handler) -> str:
    module = getattr(handler, "__module__", "?")
    return f"{module}.{getattr(handler, '__qualname__', repr(handler))}"


#: The process-wide registry used by :func:`register_handler` and :func:`get_handler`.
registry = HandlerRegistry()


def register_handler(name: str, *, replace: bool = False) -> Callable[[H], H]:
    """Decorator: ``@register_handler("my-site")`` registers the function for that website."""

    def decorate(func: H) -> H:
        registry.register(name, func, replace=replace)
        return func

    return decorate


def get_handler(name: str) -> Handler | None:
    """The handler registered for website ``name`` (process registry, then entry points), or None."""
    return registry.get(name)


def resolve_extractor(
    website: str, rules: Mapping[str, Any] | ExtractionRules | None, *, handlers: HandlerRegistry | None = None
) -> Handler:
    """What reads a website's pages: its registered handler, else its declarative rules.

    Neither raises ConfigurationError naming the website.
    """
    handler = (handlers or registry).get(website)
    if handler is not None:
        return handler
    if isinstance(rules, ExtractionRules):
        return rules
    if rules:
        return ExtractionRules.from_mapping(website, rules)
    raise ConfigurationError(
        f"website {website!r} has no extraction rules and no handler registered under that name "
        f"(entry-point group {ENTRY_POINT_GROUP!r})"
    )


async def run_extractor(extractor: Handler, page: Page) -> ExtractionResult:
    """Call ``extractor`` on ``page``, awaiting it if it is async; a wrong return type is an error.

    Declarative rules read a large page (over :data:`~crawlherd.page.OFF_LOOP_CHARS`)
    in a thread, so the event loop goes on; a page over the parse budget raises
    :class:`~crawlherd.errors.PageTooComplexError`. A Python handler is called as it is."""
    result: ExtractionResult | Awaitable[ExtractionResult]
    if isinstance(extractor, ExtractionRules) and len(page.html) > OFF_LOOP_CHARS:
        result = await asyncio.to_thread(extractor, page)
    else:
        result = extractor(page)
    if inspect.isawaitable(result):
        result = await result
    if not isinstance(result, ExtractionResult):
        raise ConfigurationError(
            f"handler for website {page.website!r} returned {type(result).__name__}, not ExtractionResult"
        )
    return result
