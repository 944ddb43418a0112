"""crawl4ai's ``ExtractionStrategy`` base class (``crawl4ai.extraction_strategy``), for code that
subclasses it: ``extract(url, html)`` gives the items of one piece of HTML, ``run(url, sections)``
those of every section, in order. crawl4ai's ready-made strategies (CSS, XPath, LLM) are not here:
crawlherd extracts with :class:`~crawlherd.extract.rules.ExtractionRules`."""

from __future__ import annotations

from typing import Any

__all__ = ["ExtractionStrategy"]


class ExtractionStrategy:
    """Subclass it and implement :meth:`extract`. ``input_format``: what the crawler hands in
    (``"markdown"``, ``"html"``, ``"fit_markdown"``), kept for the subclass to read."""

    def __init__(self, input_format: str = "markdown", **kwargs: Any) -> None:
        self.input_format = input_format
        self.options = kwargs

    def extract(self, url: str, html: str, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        raise NotImplementedError(f"{type(self).__name__}.extract(url, html)")

    def run(self, url: str, sections: list[str], *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """The items of every section, in order."""
        items: list[dict[str, Any]] = []
        for section in sections:
            items.extend(self.extract(url, section, *args, **kwargs))
        return items
