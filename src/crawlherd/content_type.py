"""The one ``Content-Type`` parser: media type and charset, used by every fetcher and by
:class:`~crawlherd.fetch.base.Response` / :class:`~crawlherd.result.CrawlResult`.

- The media type is the part before the first ``;``, stripped and lower-cased (``""`` when none).
- ``charset`` is a parameter of its own (``text/html; Charset="ISO-8859-1"``): the name is matched
  case-insensitively, the value is unquoted and lower-cased. A charset Python does not know
  (``charset=bogus``) or none at all gives ``utf-8``: the body is then decoded as UTF-8 with
  replacement characters, never a ``LookupError`` in the middle of a crawl.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping
from functools import lru_cache

__all__ = ["DEFAULT_CHARSET", "HasBody", "charset_of", "decode_body", "media_type"]

DEFAULT_CHARSET = "utf-8"


def media_type(content_type: str) -> str:
    """``"text/html; charset=utf-8"`` → ``"text/html"``; ``""`` when nothing is declared."""
    return content_type.split(";", 1)[0].strip().lower()


def charset_of(content_type: str) -> str:
    """The declared charset, lower-cased, when Python has a codec for it; else ``"utf-8"``."""
    for param in content_type.split(";")[1:]:
        name, sep, value = param.partition("=")
        if sep and name.strip().lower() == "charset":
            return _known(value.strip().strip("\"'").strip().lower())
    return DEFAULT_CHARSET


@lru_cache(maxsize=64)
def _known(label: str) -> str:
    if not label:
        return DEFAULT_CHARSET
    try:
        info = codecs.lookup(label)
    except (LookupError, ValueError):  # ValueError: a NUL in the label
        return DEFAULT_CHARSET
    # Not a text encoding (base64, zip, rot13...) or one that refuses every byte ("undefined"): UTF-8.
    if not getattr(info, "_is_text_encoding", True) or info.name == "undefined":
        return DEFAULT_CHARSET
    return label


def decode_body(body: bytes, encoding: str) -> str:
    """``body`` as text in ``encoding`` (an unknown one: UTF-8), undecodable bytes replaced."""
    return body.decode(_known(encoding.lower()), errors="replace")


class HasBody:
    """``text`` and ``content_type`` for anything with ``headers`` (lower-case keys), ``body`` and
    ``encoding``: a fetcher's Response and a CrawlResult."""

    __slots__ = ()

    headers: Mapping[str, str]
    body: bytes
    encoding: str

    @property
    def text(self) -> str:
        """The body decoded with the response's charset (undecodable bytes replaced)."""
        return decode_body(self.body, self.encoding)

    @property
    def content_type(self) -> str:
        """The media type of the ``content-type`` header, lower-case, without parameters."""
        return media_type(self.headers.get("content-type", ""))
