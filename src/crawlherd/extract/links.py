"""Link extraction for the crawler: the absolute http(s) links of a page (the function lives in
:mod:`crawlherd.page`, beside the other readings of a page, so that a CrawlResult can compute it)."""

from __future__ import annotations

from crawlherd.page import extract_links

__all__ = ["extract_links"]
