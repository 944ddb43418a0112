"""The unit of work: :class:`Request`, and its fingerprint."""

from __future__ import annotations

import base64
import hashlib
import sys
from collections.abc import Mapping
from typing import Any

from crawlherd.errors import InvalidURLError
from crawlherd.url import canonicalize

__all__ = ["FINGERPRINT_SIZE", "RECORD_VERSION", "Request", "fingerprint", "plain_get"]

#: Bytes in a fingerprint. 64 bits: the chance of any collision among 10 million URLs is about 3e-6.
FINGERPRINT_SIZE = 8
#: Version of the dict form (:meth:`Request.to_record`) that persistent backends store.
RECORD_VERSION = 1
_intern = sys.intern
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def fingerprint(method: str, canonical_url: str, body: bytes | None = None, dedup_key: str | None = None) -> bytes:
    """8-byte BLAKE2b digest of method + canonical URL + body hash (+ the dedup key, when given)."""
    h = hashlib.blake2b(method.encode("ascii"), digest_size=FINGERPRINT_SIZE)
    h.update(b" ")
    h.update(canonical_url.encode("utf-8", "surrogatepass"))
    if body:
        h.update(b"\n")
        h.update(hashlib.blake2b(body, digest_size=16).digest())
    if dedup_key:
        h.update(b"\x00")
        h.update(dedup_key.encode("utf-8"))
    return h.digest()


def plain_get(url: str) -> tuple[str, str, bytes]:
    """What ``Request(url)`` computes for a plain GET of ``url``, validation included (a malformed URL
    raises :class:`~crawlherd.errors.InvalidURLError`): the URL as the request keeps it, its host key
    and its fingerprint -- for :meth:`Request.of_plain_get`, without making the request yet."""
    canonical, host = canonicalize(url)
    url = url.strip(" ")
    return (canonical if url == canonical else url), _intern(host), fingerprint("GET", canonical)


class Request:
    """A URL to fetch, with its scheduling attributes.

    ``Request(url, *, method="GET", priority=0, depth=0, meta=None, headers=None, body=None,
    not_before=None)``. The URL is validated and canonicalised here: a malformed one raises
    :class:`~crawlherd.errors.InvalidURLError` at construction, never deep inside a fetch.

    ``priority``: higher is fetched first. ``not_before``: a time (the frontier's clock) before which
    the request is not handed out. ``meta``: free-form, JSON-serialisable data that travels with it.
    ``dedup_key``: mixed into the fingerprint, to make a deliberate revisit a new request (the workers
    use the revisit period, so an item page seen in an earlier period is fetched again).
    """

    __slots__ = (
        "_headers",
        "_meta",
        "body",
        "dedup_key",
        "depth",
        "fingerprint",
        "host",
        "method",
        "not_before",
        "priority",
        "url",
    )

    url: str
    host: str
    method: str
    priority: int
    depth: int
    _meta: dict[str, Any] | None
    _headers: dict[str, str] | None
    body: bytes | None
    not_before: float | None
    dedup_key: str | None
    fingerprint: bytes

    def __init__(
        self,
        url: str,
        *,
        method: str = "GET",
        priority: int = 0,
        depth: int = 0,
        meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | None = None,
        not_before: float | None = None,
        dedup_key: str | None = None,
        strip_tracking: bool | frozenset[str] = False,
    ) -> None:
        canonical, host = canonicalize(url, strip_tracking=strip_tracking)
        if method not in _METHODS:
            upper = method.upper() if isinstance(method, str) else method
            if upper not in _METHODS:
                raise InvalidURLError(f"unsupported HTTP method {method!r} for {url!r}", url=url)
            method = upper
        url = url.strip(" ")
        self.url = canonical if url == canonical else url  # share the string when they are equal
        self.host = _intern(host)
        self.method = method
        self.priority = int(priority)
        self.depth = int(depth)
        self._meta = dict(meta) if meta else None
        self._headers = dict(headers) if headers else None
        self.body = body = body.encode("utf-8") if isinstance(body, str) else body
        self.not_before = not_before
        self.dedup_key = dedup_key
        #: The duplicate filter's key: :data:`FINGERPRINT_SIZE` bytes.
        self.fingerprint = fingerprint(method, canonical, body, dedup_key)

    @classmethod
    def _restore(cls, url: str, host: str, fingerprint: bytes, priority: int, depth: int) -> Request:
        """A plain GET request as a frontier stored it (``url``, ``host`` and ``fingerprint`` as this class
        computed them at enqueue), without parsing the URL again: a frontier hands out thousands a second."""
        if len(fingerprint) != FINGERPRINT_SIZE or not url.startswith(("http://", "https://")) or not host:
            raise ValueError(f"not a stored request: {url!r:.200} {host!r:.100} {fingerprint!r}")
        self = cls.__new__(cls)
        self.url = url
        self.host = _intern(host)
        self.method = "GET"
        self.priority = priority
        self.depth = depth
        self._meta = self._headers = self.body = self.not_before = self.dedup_key = None
        self.fingerprint = fingerprint
        return self

    @classmethod
    def of_plain_get(
        cls, url: str, host: str, fingerprint: bytes, meta: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Request:
        """``Request(u, meta=meta, headers=headers)`` from ``url, host, fingerprint = plain_get(u)``: the
        URL is not parsed again (a crawl that validated its URLs up front makes each request when due)."""
        self = cls.__new__(cls)
        self.url = url
        self.host = host
        self.fingerprint = fingerprint
        self.method = "GET"
        self.priority = self.depth = 0
        self._meta = dict(meta) if meta else None
        self._headers = dict(headers) if headers else None
        self.body = self.not_before = self.dedup_key = None
        return self

    @property
    def meta(self) -> dict[str, Any]:
        """Free-form, JSON-serialisable data that travels with the request (created on first use)."""
        if self._meta is None:
            self._meta = {}
        return self._meta

    @property
    def headers(self) -> dict[str, str]:
        """Extra request headers (created on first use)."""
        if self._headers is None:
            self._headers = {}
        return self._headers

    @property
    def canonical_url(self) -> str:
        """The canonical form of :attr:`url` (computed again on use: frontiers keep only the
        fingerprint, which saves memory per queued request)."""
        return canonicalize(self.url)[0]

    def with_meta(self, meta: dict[str, Any]) -> Request:
        """The same request (URL, fingerprint and all) carrying ``meta`` (kept as given, not copied): not
        validated again -- a session's fetch of a leased request makes one per page."""
        clone = Request.__new__(Request)
        for name in Request.__slots__:
            setattr(clone, name, getattr(self, name))
        clone._meta = meta
        return clone

    def replace(self, **changes: Any) -> Request:
        """A copy with some attributes changed (the URL is validated again if it changes)."""
        kwargs: dict[str, Any] = {
            "method": self.method,
            "priority": self.priority,
            "depth": self.depth,
            "meta": self._meta,
            "headers": self._headers,
            "body": self.body,
            "not_before": self.not_before,
            "dedup_key": self.dedup_key,
        }
        url = changes.pop("url", self.url)
        kwargs.update(changes)
        return Request(url, **kwargs)

    def to_record(self, *, fingerprint: bool = False) -> dict[str, Any]:
        """A JSON-safe dict with a version field, for persistent backends (never pickle); with
        ``fingerprint``, the fingerprint too (``"fp"``, hex), so that :meth:`from_record` given the
        request's host need not parse the URL again."""
        rec: dict[str, Any] = {"v": RECORD_VERSION, "url": self.url, "p": self.priority, "d": self.depth}
        if self.method != "GET":
            rec["m"] = self.method
        if self._meta:
            rec["meta"] = self._meta
        if self._headers:
            rec["h"] = self._headers
        if self.body is not None:
            rec["b"] = base64.b64encode(self.body).decode("ascii")
        if self.not_before is not None:
            rec["nb"] = self.not_before
        if self.dedup_key is not None:
            rec["k"] = self.dedup_key
        if fingerprint:
            rec["fp"] = self.fingerprint.hex()
        return rec

    @classmethod
    def from_record(cls, rec: Mapping[str, Any], *, host: str | None = None) -> Request:
        """Rebuild a request from :meth:`to_record`'s dict; a foreign or corrupt one raises ValueError.
        ``host``: the request's host as the frontier that stored the record knows it -- with a record
        that carries its fingerprint, the URL is then not parsed again (a frontier hands out thousands
        a second)."""
        if not isinstance(rec, Mapping) or rec.get("v") != RECORD_VERSION:
            raise ValueError(f"not a version-{RECORD_VERSION} request record: {rec!r:.200}")
        body = rec.get("b")
        fp = rec.get("fp")
        method = rec.get("m", "GET")
        url = rec["url"]
        if (host and isinstance(fp, str) and isinstance(url, str) and len(fp) == 2 * FINGERPRINT_SIZE
                and method in _METHODS):
            self = cls._restore(url, host, bytes.fromhex(fp), int(rec.get("p", 0)), int(rec.get("d", 0)))
            self.method = method
            meta, headers = rec.get("meta"), rec.get("h")
            self._meta = dict(meta) if meta else None
            self._headers = dict(headers) if headers else None
            self.body = base64.b64decode(body) if body is not None else None
            self.not_before = rec.get("nb")
            self.dedup_key = rec.get("k")
            return self
        return cls(
            url,
            method=method,
            priority=rec.get("p", 0),
            depth=rec.get("d", 0),
            meta=rec.get("meta"),
            headers=rec.get("h"),
            body=base64.b64decode(body) if body is not None else None,
            not_before=rec.get("nb"),
            dedup_key=rec.get("k"),
        )

    def __repr__(self) -> str:
        extra = f", priority={self.priority}" if self.priority else ""
        return f"<Request {self.method} {self.url}{extra}>"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Request):
            return NotImplemented
        return self.fingerprint == other.fingerprint and self.priority == other.priority

    def __hash__(self) -> int:
        return hash(self.fingerprint)
