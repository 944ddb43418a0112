"""How a request is stored in the Redis frontier, and read back.

A request is one packed member of its host's queue, ``"<id>\\t<batch>\\t<body>"`` (the scripts add the
header). The body is ``"<priority> <depth> <url> <fingerprint hex>"`` for a plain GET -- most of a
crawl's requests, handed out again without parsing their URL -- else the JSON of
:meth:`Request.to_record` with its fingerprint (it starts with ``{`` and carries a version field); never pickle. An
ENQUEUE argument puts the duplicate filter's two halves, the not-before time, the clamped priority,
the request's number (sharded frontiers) and its host in front of the body.
"""

from __future__ import annotations

from typing import Any

from crawlherd import _json
from crawlherd.frontier.dupefilter import fp_to_int
from crawlherd.request import Request

__all__ = ["decode", "encode_body", "enqueue_arg", "filter_args", "priority", "raw", "text"]

_PRIO_LIMIT = (1 << 18) - 1  # scores are -prio * 2**34 + seq: exact in a double for |prio| < 2**18


def text(value: Any) -> str:
    """A reply as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def raw(value: Any) -> bytes:
    """A reply as bytes."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def priority(request: Request) -> int:
    """The request's priority, clamped to what a score keeps exactly."""
    return max(-_PRIO_LIMIT, min(_PRIO_LIMIT, request.priority))


def encode_body(request: Request) -> str:
    """A request as the frontier stores it (see the module docstring)."""
    rec = request.to_record()
    # v, url, p, d: nothing else to keep; no space (a field separator) nor newline (ENQUEUE's line separator)
    if len(rec) == 4 and " " not in request.url and "\n" not in request.url:
        return f"{request.priority} {request.depth} {request.url} {request.fingerprint.hex()}"
    rec["fp"] = request.fingerprint.hex()  # read back without parsing the URL (Request.from_record)
    return _json.dumps(rec)


def decode(body: bytes, host: str) -> Request:
    """A stored body back to its request (``host``: the queue it was in). Raises ValueError, KeyError,
    TypeError or IndexError for a body that is neither form (the caller moves it aside)."""
    if body[:1] == b"{":
        return Request.from_record(_json.loads(body), host=host)
    prio, depth, url, fp = body.split(b" ", 3)
    return Request._restore(url.decode("utf-8"), host, bytes.fromhex(fp.decode("ascii")), int(prio), int(depth))


def filter_args(request: Request, kind: str, bits: int) -> tuple[int, int]:
    """The duplicate filter's two halves of the request's fingerprint: (bucket, member) of the exact
    filter's ``2**bits`` sets, or the Bloom filter's two hashes."""
    fp = fp_to_int(request.fingerprint)
    if kind == "exact":
        return fp & ((1 << bits) - 1), fp >> bits
    return fp & 0xFFFFFFFF, (fp >> 32) | 1


def enqueue_arg(request: Request, kind: str, bits: int, number: int | str = "-") -> str:
    """A request as one ENQUEUE argument: ``"<df_a> <df_b> <not_before|-> <priority> <number|-> <host>
    <body>"`` (``number`` on a sharded frontier)."""
    a, b = filter_args(request, kind, bits)
    nb = "-" if request.not_before is None else repr(float(request.not_before))
    return f"{a} {b} {nb} {priority(request)} {number} {request.host} {encode_body(request)}"
