"""Link extraction for the crawler: the absolute http(s) links of a page."""

from __future__ import annotations

from urllib.parse import urljoin

__all__ = ["extract_links"]

_SKIPPED_SCHEMES = ("#", "javascript:", "mailto:", "tel:", "data:")


def extract_links(html: str, base_url: str) -> list[str]:
    """Absolute http(s) links of ``<a href>`` in ``html`` (``<base href>`` honoured), fragments
    dropped, duplicates removed, document order kept."""
    from selectolax.lexbor import LexborHTMLParser as HTMLParser

    tree = HTMLParser(html)
    base = tree.css_first("base[href]")
    if base is not None:
        base_url = urljoin(base_url, base.attributes.get("href") or "")
    seen: dict[str, None] = {}
    for node in tree.css("a[href]"):
        href = (node.attributes.get("href") or "").strip()
        if not href or href.startswith(_SKIPPED_SCHEMES):
            continue
        url = urljoin(base_url, href).split("#", 1)[0]
        if url.startswith(("http://", "https://")):
            seen.setdefault(url, None)
    return list(seen)
