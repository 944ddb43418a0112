"""How a request is stored in the Redis frontier, and read back.

A request is one packed member of its host's queue, ``"<id>\\t<batch>\\t<body>"``, and of the loose
requests (``gq``) with its host and score in front; the client writes it whole. The body is ``"<priority>
<depth> <url> <fingerprint hex>"`` for a plain GET -- most of a crawl's requests, handed out again without
parsing their URL -- else the JSON of :meth:`Request.to_record` with its fingerprint (it starts with ``{``
and carries a version field); never pickle. ENQUEUE takes each request as six strings
(:func:`enqueue_fields`): the duplicate filter's two halves, the not-before time and clamped priority, and
its score, host and member as they are stored -- the first five of every request in one argument
(:func:`packed`, one after another), each member an argument of its own (Redis's Lua makes each string it
is given a Lua string, hashing each byte: the member inside the one argument was hashed twice).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from crawlherd import _json
from crawlherd.frontier.dupefilter import fp_to_int
from crawlherd.request import Request

__all__ = [
    "SCORE_SHIFT", "decode", "encode_body", "enqueue_fields", "filter_args", "packed", "priority", "raw", "text"
]

_PRIO_LIMIT = (1 << 18) - 1  # scores are -prio * 2**34 + seq: exact in a double for |prio| < 2**18
SCORE_SHIFT = 1 << 34  # a queue score: -priority * SCORE_SHIFT + the request's number (prelude.lua)


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


def enqueue_fields(request: Request, kind: str, bits: int, kp: str, number: int, batch: int) -> tuple[str, ...]:
    """A request as ENQUEUE takes it (enqueue.lua): ``df_a, df_b, not_before ('-': none, else "<not_before>
    <priority>"), score, host, member`` -- df_a the key of its bucket of the exact filter (``kp``: the
    shard's key prefix), the member ``"<host>\\t<score>\\t<number>\\t<batch>\\t<body>"`` and its score as
    stored."""
    a, b = filter_args(request, kind, bits)
    prio = priority(request)
    nb = "-" if request.not_before is None else f"{float(request.not_before)!r} {prio}"
    host = request.host
    score = str(-prio * SCORE_SHIFT + number)
    member = f"{host}\t{score}\t{number}\t{batch}\t{encode_body(request)}"
    return f"{kp}:df:{a}" if kind == "exact" else str(a), str(b), nb, score, host, member


_U16, _U32 = struct.Struct(">H").pack, struct.Struct(">I").pack


def packed(fields: Sequence[str | int], *, array: bool = True) -> bytes:
    """Strings (and integers from 0 to 2**32 - 1) as ENQUEUE and ACK read them (``cmsgpack.unpack``, in C):
    a MessagePack array, or (``array=False``) the values one after another, which ``cmsgpack.unpack``
    returns as that many values (the script puts them in a table of their size at once: an array's table
    grows an element at a time). An integer is a Lua number there."""
    out = bytearray()
    if array:
        out.append(0xDD)
        out += _U32(len(fields))
    for field in fields:
        if isinstance(field, int):
            if not 0 <= field < 1 << 32:
                raise ValueError(f"{field} is out of packed's integer range")
            if field < 128:
                out.append(field)
            else:
                out.append(0xCE)
                out += _U32(field)
            continue
        data = field.encode("utf-8")
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 256:
            out.append(0xD9)
            out.append(n)
        elif n < 65536:
            out.append(0xDA)
            out += _U16(n)
        else:
            out.append(0xDB)
            out += _U32(n)
        out += data
    return bytes(out)
