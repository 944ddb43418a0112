"""Crawlo's request fingerprints (``crawlo.utils.request.fingerprint``), computed by crawlherd.

A fingerprint is crawlherd's own (:attr:`crawlherd.request.Request.fingerprint`: the method, the
canonical URL and the body), as a hex string -- so Crawlo's filters and crawlherd's frontier agree on
what a duplicate is. As in Crawlo (and Scrapy), headers and ``meta`` take no part unless named:
``include_headers`` (names, case-insensitive) and the ``meta`` passed in are mixed in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from crawlherd.request import Request as FrontierRequest

__all__ = ["FingerprintGenerator", "generate_data_fingerprint", "generate_request_fingerprint"]


def _extra(headers: Mapping[str, Any] | None, meta: Mapping[str, Any] | None,
           include_headers: Iterable[str] | None) -> str | None:
    wanted = {name.lower() for name in include_headers or ()}
    chosen = {k.lower(): str(v) for k, v in (headers or {}).items() if k.lower() in wanted}
    if not chosen and not meta:
        return None
    return json.dumps({"headers": chosen, "meta": dict(meta or {})}, sort_keys=True, default=str)


def generate_request_fingerprint(
    method: str,
    url: str,
    body: bytes | str | None = b"",
    headers: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
    include_headers: Iterable[str] | None = None,
) -> str:
    """The fingerprint of a request, hex: crawlherd's (method, canonical URL, body), with the headers
    named in ``include_headers`` and the given ``meta`` mixed in."""
    request = FrontierRequest(url, method=method or "GET", body=body or None,
                              dedup_key=_extra(headers, meta, include_headers))
    return request.fingerprint.hex()


def generate_data_fingerprint(data: Any) -> str:
    """The SHA-256 of ``data`` in a stable JSON form (dict keys sorted)."""
    blob = json.dumps(data, sort_keys=True, default=str, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()


class FingerprintGenerator:
    """Crawlo's fingerprint helpers as static methods."""

    @staticmethod
    def request_fingerprint(method: str, url: str, body: bytes = b"", headers: Mapping[str, Any] | None = None,
                            meta: Mapping[str, Any] | None = None) -> str:
        return generate_request_fingerprint(method, url, body, headers, meta)

    @staticmethod
    def item_fingerprint(item: Any) -> str:
        data = dict(item) if isinstance(item, Mapping) else getattr(item, "__dict__", item)
        return generate_data_fingerprint(data)

    @staticmethod
    def data_fingerprint(data: Any) -> str:
        return generate_data_fingerprint(data)
