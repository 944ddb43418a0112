"""The extracted item: what extraction produces and sinks store.

An :class:`Item` is identified across searches, runs and workers by its 8-byte fingerprint of the
website name and the canonical item URL (:func:`item_fingerprint`); :func:`make_item` builds one the
way the declarative rules do, for Python handlers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawlherd.request import fingerprint
from crawlherd.url import canonicalize_url

__all__ = ["Item", "item_fingerprint", "make_item"]


@dataclass(frozen=True, slots=True)
class Item:
    """One extracted item: the ``website`` it came from, the ``url`` of its page, its ``fields`` as the
    website's rules extracted them; ``fingerprint`` (8 bytes) identifies it across searches and runs."""

    website: str
    url: str
    fingerprint: bytes
    fields: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"website", "url", "fingerprint": hex, "fields": {...}}``."""
        return {
            "website": self.website,
            "url": self.url,
            "fingerprint": self.fingerprint.hex(),
            "fields": dict(self.fields),
        }


def item_fingerprint(website: str, url: str, *, content: bytes | None = None) -> bytes:
    """8-byte fingerprint of an item: the website name + the canonical item URL (+ the item's
    ``content`` when it has no URL of its own and lives on the page ``url``).

    Uses :func:`crawlherd.request.fingerprint` with the pseudo-method ``ITEM`` (so an item never
    shares a key with the request for its page) and the website name in the body slot.
    """
    body = website.encode("utf-8") if content is None else website.encode("utf-8") + b"\n" + content
    return fingerprint("ITEM", canonicalize_url(url), body)


def make_item(website: str, url: str, fields: Mapping[str, Any]) -> Item:
    """Build an :class:`Item` the same way the rules do (for Python handlers). Bad URL: InvalidURLError."""
    return Item(website=website, url=url, fingerprint=item_fingerprint(website, url), fields=dict(fields))
