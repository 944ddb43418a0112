"""Crawlo's older fingerprint call (``crawlo.utils.request.request.request_fingerprint``), deprecated
there and here in favour of :func:`~crawlherd.compat.crawlo.utils.request.fingerprint.generate_request_fingerprint`."""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from crawlherd.compat.crawlo.utils.request.fingerprint import generate_request_fingerprint

__all__ = ["request_fingerprint"]


def request_fingerprint(request: Any, include_headers: Iterable[str] | None = None) -> str:
    """The fingerprint of ``request`` (method, URL, body, and the headers named)."""
    warnings.warn("request_fingerprint() is deprecated: use generate_request_fingerprint()",
                  DeprecationWarning, stacklevel=2)
    return generate_request_fingerprint(request.method, request.url, getattr(request, "body", b""),
                                        getattr(request, "headers", None), None, include_headers)
