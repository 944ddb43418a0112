"""crawl4ai's ``PruningContentFilter`` (``crawl4ai.content_filter_strategy``): boilerplate removal by
scoring each block of a page, with crawl4ai's documented rules.

Navigation, headers, footers, asides, forms, iframes, scripts and styles go first, with comments. Then,
from ``<body>`` down, every element gets a score in [0, ~1]: the weighted mean of its text density
(text characters / markup characters, weight 0.4), one minus its link density (0.2), a weight for its
tag (``p`` 1.0, ``article`` 1.5, ``div`` 0.5, ``span`` 0.3, headings 1.2 to 0.7 ..., weight 0.2), a
class/id term (weight 0.1; crawl4ai counts -0.5 for each of class and id named like ``nav``,
``footer``, ``sidebar``, ``ads``, ``comment``, ``share`` and clamps the term at 0, so it only ever
dilutes the others -- kept so that scores match crawl4ai's) and the log of its text length (0.1).
An element scoring under ``threshold`` is removed with everything in it; a kept one has its children
scored in turn. With
``threshold_type="dynamic"`` the threshold is lowered for important tags (``article``, ``main``,
headings: x0.8) and text-dense ones (x0.9) and raised for link-heavy ones (x1.2). With
``min_word_threshold``, an element of fewer words is removed whatever its score.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from crawlherd.errors import ConfigurationError

__all__ = ["PruningContentFilter", "RelevantContentFilter"]

_EXCLUDED_TAGS = ("nav", "footer", "header", "aside", "script", "style", "form", "iframe", "noscript")
_NEGATIVE = re.compile(r"nav|footer|header|sidebar|ads|comment|promo|advert|social|share", re.I)
_TAG_WEIGHTS = {
    "div": 0.5, "p": 1.0, "article": 1.5, "section": 1.0, "span": 0.3, "li": 0.5, "ul": 0.5, "ol": 0.5,
    "h1": 1.2, "h2": 1.1, "h3": 1.0, "h4": 0.9, "h5": 0.8, "h6": 0.7,
}
_IMPORTANT = {"article": 1.5, "main": 1.4, "section": 1.3, "p": 1.2, "h1": 1.4, "h2": 1.3, "h3": 1.2}
# (text density, link density, tag weight, class/id weight, text length)
_WEIGHTS = (0.4, 0.2, 0.2, 0.1, 0.1)


class RelevantContentFilter:
    """The base of crawl4ai's content filters: ``filter_content(html)`` gives the HTML blocks kept."""

    excluded_tags: tuple[str, ...] = _EXCLUDED_TAGS

    def filter_content(self, html: str) -> list[str]:
        raise NotImplementedError


class PruningContentFilter(RelevantContentFilter):
    """``PruningContentFilter(user_query=None, min_word_threshold=None, threshold_type="fixed",
    threshold=0.48, preserve_classes=None, preserve_tags=None)``: see the module docstring.
    ``preserve_classes`` / ``preserve_tags``: elements always kept, whatever their score.
    ``user_query`` is refused: relevance to a query is crawl4ai's ``BM25ContentFilter``, which
    crawlherd does not have."""

    def __init__(
        self,
        user_query: str | None = None,
        min_word_threshold: int | None = None,
        threshold_type: str = "fixed",
        threshold: float = 0.48,
        preserve_classes: Iterable[str] | None = None,
        preserve_tags: Iterable[str] | None = None,
    ) -> None:
        if user_query is not None:
            raise ConfigurationError(
                "PruningContentFilter(user_query=...): crawlherd prunes by structure only; a query-based "
                "filter (crawl4ai's BM25ContentFilter) is not available"
            )
        if threshold_type not in ("fixed", "dynamic"):
            raise ConfigurationError(
                f"PruningContentFilter threshold_type={threshold_type!r}: use 'fixed' or 'dynamic'"
            )
        if min_word_threshold is not None and (not isinstance(min_word_threshold, int) or min_word_threshold < 0):
            raise ConfigurationError(f"PruningContentFilter min_word_threshold={min_word_threshold!r}: an int >= 0")
        self.user_query = user_query
        self.min_word_threshold = min_word_threshold
        self.threshold_type = threshold_type
        self.threshold = float(threshold)
        self.preserve_classes = frozenset(preserve_classes or ())
        self.preserve_tags = frozenset(preserve_tags or ())

    def __repr__(self) -> str:
        return (
            f"PruningContentFilter(threshold_type={self.threshold_type!r}, threshold={self.threshold}, "
            f"min_word_threshold={self.min_word_threshold})"
        )

    def filter_content(self, html: str) -> list[str]:
        """The blocks of ``html`` that survive, as HTML strings (the body's children with text)."""
        if not html or not isinstance(html, str):
            return []
        from selectolax.lexbor import LexborHTMLParser

        tree = LexborHTMLParser(html)
        tree.strip_tags(list(self.excluded_tags))
        root = tree.root
        for node in list(root.traverse(include_text=True)) if root is not None else ():
            if node.tag == "-comment":
                node.decompose()
        body = tree.body
        if body is None:
            return []
        self._prune(body)
        return [child.html or "" for child in body.iter() if (child.text(strip=True) or "")]

    def _preserved(self, node: Any) -> bool:
        if node.tag in self.preserve_tags:
            return True
        classes = set((node.attributes.get("class") or "").split())
        return bool(classes & self.preserve_classes)

    def _prune(self, node: Any) -> None:
        if self._preserved(node):
            return
        text = node.text(strip=True) or ""
        text_len = len(text)
        tag_len = len(node.inner_html or "")
        link_len = sum(len(a.text(strip=True) or "") for a in node.iter() if a.tag == "a")
        score = self._score(node, text_len, tag_len, link_len)
        if score < self._threshold(node.tag, text_len, tag_len, link_len):
            node.decompose()
            return
        for child in list(node.iter()):
            self._prune(child)

    def _threshold(self, tag: str, text_len: int, tag_len: int, link_len: int) -> float:
        threshold = self.threshold
        if self.threshold_type == "fixed":
            return threshold
        if _IMPORTANT.get(tag, 0.7) > 1:
            threshold *= 0.8
        if tag_len and text_len / tag_len > 0.4:
            threshold *= 0.9
        if (link_len / text_len if text_len else 1.0) > 0.6:
            threshold *= 1.2
        return threshold

    def _score(self, node: Any, text_len: int, tag_len: int, link_len: int) -> float:
        if self.min_word_threshold:
            words = len((node.text(separator=" ", strip=True) or "").split())
            if words < self.min_word_threshold:
                return -1.0
        penalty = 0.0
        for name in ("class", "id"):
            value = node.attributes.get(name) or ""
            if value and _NEGATIVE.search(value):
                penalty -= 0.5
        parts = (
            text_len / tag_len if tag_len else 0.0,
            1.0 - (link_len / text_len if text_len else 0.0),
            _TAG_WEIGHTS.get(node.tag, 0.5),
            max(0.0, penalty),
            math.log(text_len + 1),
        )
        return sum(w * p for w, p in zip(_WEIGHTS, parts, strict=True)) / sum(_WEIGHTS)
