"""crawl4ai's ``DefaultMarkdownGenerator`` (``crawl4ai.markdown_generation_strategy``): a page as
Markdown, its links as numbered citations, and -- with a content filter -- the "fit" markdown of what
the filter kept. Needs markdownify (``pip install 'crawlherd[markdown]'``)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urljoin

from crawlherd.compat.crawl4ai.content_filter_strategy import RelevantContentFilter
from crawlherd.compat.crawl4ai.models import MarkdownGenerationResult
from crawlherd.errors import ConfigurationError
from crawlherd.page import clean_html

__all__ = ["DefaultMarkdownGenerator", "MarkdownGenerationStrategy", "html_to_markdown"]

_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"([^\"]*)\")?\)")
_SOURCES = ("cleaned_html", "raw_html", "fit_html")


def html_to_markdown(html: str, base_url: str = "") -> str:
    """``html`` as Markdown: ATX headings, ``-`` bullets, links and images absolute against ``base_url``,
    at most one blank line in a row."""
    try:
        from markdownify import markdownify
    except ImportError:
        raise ConfigurationError(
            "DefaultMarkdownGenerator needs markdownify: pip install 'crawlherd[markdown]'"
        ) from None
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    if base_url:
        for selector, attr in (("a[href]", "href"), ("img[src]", "src")):
            for node in tree.css(selector):
                node.attrs[attr] = urljoin(base_url, node.attributes.get(attr) or "")
    body = tree.body
    text: str = markdownify((body.html if body is not None else tree.html) or "", heading_style="ATX", bullets="-")
    out: list[str] = []
    for line in (raw.rstrip() for raw in text.strip().splitlines()):
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


def _citations(markdown: str) -> tuple[str, str]:
    """``markdown`` with each link ``[text](url)`` as ``text⟨n⟩`` (one number per URL), and the
    numbered reference list."""
    numbers: dict[str, int] = {}
    titles: dict[str, str] = {}

    def cite(m: re.Match[str]) -> str:
        text, url, title = m.group(1), m.group(2), m.group(3)
        n = numbers.setdefault(url, len(numbers) + 1)
        titles.setdefault(url, title or text)
        return f"{text}⟨{n}⟩"

    cited = _LINK.sub(cite, markdown)
    if not numbers:
        return cited, ""
    refs = "\n".join(f"⟨{n}⟩ {url}: {titles[url]}" if titles[url] else f"⟨{n}⟩ {url}" for url, n in numbers.items())
    return cited, f"\n\n## References\n\n{refs}\n"


class MarkdownGenerationStrategy:
    """The base of crawl4ai's markdown generators: ``generate_markdown(input_html, base_url, ...)``."""

    def __init__(
        self, content_filter: RelevantContentFilter | None = None, options: dict[str, Any] | None = None,
        verbose: bool = False, content_source: str = "cleaned_html",
    ) -> None:
        if content_source not in _SOURCES:
            raise ConfigurationError(f"content_source={content_source!r}: use one of {_SOURCES}")
        if options:
            raise ConfigurationError(
                f"markdown generator options {sorted(options)}: crawlherd's markdown (markdownify) does not take "
                "crawl4ai's html2text options"
            )
        self.content_filter = content_filter
        self.options = options or {}
        self.verbose = verbose
        self.content_source = content_source

    def generate_markdown(
        self, input_html: str, base_url: str = "", html2text_options: dict[str, Any] | None = None,
        content_filter: RelevantContentFilter | None = None, citations: bool = True, **kwargs: Any,
    ) -> MarkdownGenerationResult:
        raise NotImplementedError


class DefaultMarkdownGenerator(MarkdownGenerationStrategy):
    """``DefaultMarkdownGenerator(content_filter=None, options=None, content_source="cleaned_html")``.

    ``generate_markdown(html, base_url)`` gives a :class:`~crawlherd.compat.crawl4ai.models.MarkdownGenerationResult`:
    the page (scripts, styles, comments and hidden inputs removed) as Markdown, the same with numbered
    citations and their reference list, and with a content filter (this one's, or the one passed in)
    ``fit_html`` -- the blocks it kept -- and ``fit_markdown``. ``content_source``: what the crawler
    hands in (``cleaned_html``, ``raw_html``; ``fit_html`` means the filtered HTML becomes the markdown).
    ``options`` (crawl4ai's html2text switches) are refused: the conversion is markdownify's."""

    def generate_markdown(
        self, input_html: str, base_url: str = "", html2text_options: dict[str, Any] | None = None,
        content_filter: RelevantContentFilter | None = None, citations: bool = True, **kwargs: Any,
    ) -> MarkdownGenerationResult:
        if html2text_options:
            raise ConfigurationError("html2text_options: crawlherd's markdown (markdownify) does not take them")
        if kwargs:
            raise ConfigurationError(f"generate_markdown: unknown options {sorted(kwargs)}")
        html = clean_html(input_html) if self.content_source == "cleaned_html" else input_html
        chosen = content_filter or self.content_filter
        fit_html = ""
        fit_markdown = ""
        if chosen is not None:
            fit_html = "\n".join(f"<div>{block}</div>" for block in chosen.filter_content(input_html))
            fit_markdown = html_to_markdown(fit_html, base_url)
        if self.content_source == "fit_html" and chosen is not None:
            raw = fit_markdown
        else:
            raw = html_to_markdown(html, base_url)
        cited, refs = _citations(raw) if citations else (raw, "")
        return MarkdownGenerationResult(raw, cited, refs, fit_markdown, fit_html)
