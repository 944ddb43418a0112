"""The job message: what the dispatch service publishes and the workers consume.

Schema version 2 (``docs/job-message.md``): the website's configuration travels typed, as the
:class:`~crawlherd.sitespec.SiteSpec` the targets file declared (``site``). It is the only version:
a body of any other (version 1's untyped ``metadata`` dict included, never released) is an unknown
version, dead-lettered like any invalid message. Both ends validate: :func:`encode_job` refuses to publish
an invalid message, :func:`decode_job` refuses (with :class:`~crawlherd.errors.MessageError`) a body
that is not JSON, not an object, of an unknown ``schema_version`` or invalid -- the worker
dead-letters those. Unknown fields are refused too: adding a field means a new schema version.

:func:`decode_job` raises nothing but :class:`~crawlherd.errors.MessageError`, whatever the body (it
comes from a broker anyone with access can publish to): a body over :data:`MAX_BODY_BYTES`, not UTF-8,
nested deeper than :data:`MAX_DEPTH`, or of the wrong types is refused with the reason, before or
instead of any deeper parsing.
"""

from __future__ import annotations

import hashlib
import json
import math
import uuid
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from crawlherd.errors import MessageError
from crawlherd.sitespec import HttpURL, SiteSpec

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_DEPTH",
    "SCHEMA_VERSION",
    "SUPPORTED_VERSIONS",
    "JobMessage",
    "SlotBodies",
    "decode_job",
    "encode_job",
    "format_slot",
    "idempotency_key",
    "job_id_for",
]

SCHEMA_VERSION = 2
SUPPORTED_VERSIONS = frozenset({SCHEMA_VERSION})
#: The largest job message body decoded (a real one is a few kB: the website's whole configuration).
MAX_BODY_BYTES = 1_000_000
#: The deepest JSON nesting decoded (a real message nests about 6 levels).
MAX_DEPTH = 32
_JOB_NAMESPACE = uuid.UUID("6f1c2a8e-5b0e-4a4e-9d7c-63726177686c")
_JOB_NAMESPACE_BYTES = _JOB_NAMESPACE.bytes
_JOB_NAMESPACE_SHA1 = hashlib.sha1(_JOB_NAMESPACE_BYTES, usedforsecurity=False)
_VARIANT_DIGIT = {f"{n:x}": "89ab"[n & 3] for n in range(16)}


def format_slot(slot_at: datetime) -> str:
    """A slot as it appears in keys and messages: UTC ISO-8601 with ``Z``, microseconds only if any."""
    if slot_at.tzinfo is None:
        raise MessageError(f"slot {slot_at!r} is naive: slots are aware UTC datetimes")
    slot_at = slot_at.astimezone(UTC)
    spec = "microseconds" if slot_at.microsecond else "seconds"
    return slot_at.replace(tzinfo=None).isoformat(timespec=spec) + "Z"


def idempotency_key(target_id: int, slot_at: datetime) -> str:
    """``"<target_id>:<slot>"``: the same for every publish of one (target, slot)."""
    return f"{target_id}:{format_slot(slot_at)}"


def job_id_for(target_id: int, slot_at: datetime) -> str:
    """A UUID derived from the idempotency key, so a republished job keeps its id."""
    return _job_uuid(idempotency_key(target_id, slot_at))


def _job_uuid(key: str) -> str:
    """``str(uuid.uuid5(_JOB_NAMESPACE, key))``, a fifth of its cost (a tick makes thousands): the
    namespace hashed once, the version and variant bits set on the hex digits."""
    sha = _JOB_NAMESPACE_SHA1.copy()
    sha.update(key.encode())
    h = sha.hexdigest()
    # version 5 (the 13th digit); RFC 4122 variant (the 17th digit's top bits: 10)
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT_DIGIT[h[16]]}{h[17:20]}-{h[20:32]}"


class JobMessage(BaseModel):
    """One scrape job: crawl ``search_url`` of website ``site`` for one target at one slot.

    ``attempt_count`` is the number of earlier attempts (0 when the dispatcher publishes it; a worker
    re-publishing a failed job adds one). ``site`` is the website's whole configuration, typed.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    schema_version: Literal[2] = 2
    job_id: str
    idempotency_key: str
    target_id: int = Field(ge=1)
    slot_at: datetime
    website_id: int = Field(ge=1)
    site: SiteSpec
    search_url: HttpURL = Field(min_length=1)
    keywords_used: str
    location_used: str | None = None
    attempt_count: int = Field(default=0, ge=0)
    created_at: datetime

    @field_validator("slot_at", "created_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        if value.tzinfo is None:
            raise ValueError("must carry a time zone (UTC, e.g. 2026-01-01T07:00:00Z)")
        return value.astimezone(UTC)

    @field_validator("job_id")
    @classmethod
    def _uuid(cls, value: str) -> str:
        try:
            return str(uuid.UUID(value))
        except ValueError:
            raise ValueError("must be a UUID") from None

    @field_serializer("slot_at")
    def _slot_z(self, value: datetime) -> str:
        return format_slot(value)

    @model_validator(mode="after")
    def _key_matches(self) -> JobMessage:
        expected = idempotency_key(self.target_id, self.slot_at)
        if self.idempotency_key != expected:
            raise ValueError(
                f"idempotency_key {self.idempotency_key!r} does not match target_id:slot_at ({expected!r})"
            )
        return self

    @classmethod
    def for_slot(cls, *, target_id: int, slot_at: datetime, created_at: datetime, **fields: Any) -> JobMessage:
        """A message for (target, slot) with its derived ``job_id`` and ``idempotency_key``."""
        return cls(
            job_id=job_id_for(target_id, slot_at),
            idempotency_key=idempotency_key(target_id, slot_at),
            target_id=target_id,
            slot_at=slot_at,
            created_at=created_at,
            **fields,
        )


def encode_job(message: JobMessage) -> bytes:
    """The wire form (compact UTF-8 JSON). A :class:`JobMessage` is validated when it is built and is
    frozen, so what is encoded is valid; anything else is refused."""
    if not isinstance(message, JobMessage):
        raise MessageError(f"refusing to publish {type(message).__name__}: expected a JobMessage")
    return message.model_dump_json().encode()


#: The fields of :class:`JobMessage`, in the order :class:`SlotBodies` writes them (a test holds it to the model).
BODY_FIELDS = (
    "schema_version", "job_id", "idempotency_key", "target_id", "slot_at", "website_id", "site", "search_url",
    "keywords_used", "location_used", "attempt_count", "created_at",
)
_DATETIME = TypeAdapter(datetime)
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def _plain(value: object) -> bool:
    """True when ``value`` is a string that needs neither stripping nor escaping beyond what both JSON
    encoders (pydantic's and :mod:`json`'s) agree on."""
    return type(value) is str and value.isprintable() and not (value and (value[0].isspace() or value[-1].isspace()))


def _quoted(value: str) -> str:
    """``_dumps(value)`` of a :func:`_plain` string: as it is, in quotes, unless it holds a quote or a
    backslash (the only characters of a printable string JSON escapes; not ASCII ones stay as they are)."""
    if '"' in value or "\\" in value:
        return _dumps(value)
    return f'"{value}"'


class SlotBodies:
    """The job messages of one website's targets, created at one moment (a tick), for many slots:
    :meth:`encode` gives exactly the bytes ``encode_job(JobMessage.for_slot(...))`` gives (the tests
    compare them), but validates and serialises the website's :class:`SiteSpec` once, not once per
    slot -- pydantic re-runs a nested model's validators for every message it is part of, the larger
    part of a tick's work. A value the shortcut cannot vouch for (whitespace to strip, control
    characters, a bad id) takes the model's own path, with its errors."""

    __slots__ = ("_fast", "_head", "_site", "_slots", "_tail", "created_at", "site", "website_id")

    def __init__(self, *, website_id: int, site: SiteSpec, created_at: datetime) -> None:
        self.website_id = website_id
        self.site = site
        self.created_at = created_at
        self._slots: dict[datetime, str] = {}  # format_slot of the slots seen (a tick's targets share a few)
        self._fast = (
            type(website_id) is int and website_id >= 1 and isinstance(site, SiteSpec) and created_at.tzinfo is not None
        )
        if self._fast:
            created = _DATETIME.dump_json(created_at.astimezone(UTC)).decode()
            self._site = f',"website_id":{website_id},"site":{site.model_dump_json()},"search_url":'
            self._tail = f',"attempt_count":0,"created_at":{created}}}'

    def encode(
        self, *, target_id: int, slot_at: datetime, search_url: str, keywords_used: str, location_used: str | None
    ) -> tuple[str, str]:
        """``(idempotency key, body)`` of the job of ``target_id`` for ``slot_at``."""
        if (
            self._fast
            and type(target_id) is int
            and target_id >= 1
            and slot_at.tzinfo is not None
            and _plain(search_url)
            and search_url.lower().startswith(("http://", "https://"))
            and _plain(keywords_used)
            and (location_used is None or _plain(location_used))
        ):
            slot = self._slots.get(slot_at)
            if slot is None:
                slot = self._slots[slot_at] = format_slot(slot_at)
            key = f"{target_id}:{slot}"
            job_id = _job_uuid(key)
            location = "null" if location_used is None else _quoted(location_used)
            body = (
                f'{{"schema_version":{SCHEMA_VERSION},"job_id":"{job_id}","idempotency_key":"{key}",'
                f'"target_id":{target_id},"slot_at":"{slot}"{self._site}{_quoted(search_url)},'
                f'"keywords_used":{_quoted(keywords_used)},"location_used":{location}{self._tail}'
            )
            return key, body
        message = JobMessage.for_slot(
            target_id=target_id,
            slot_at=slot_at,
            created_at=self.created_at,
            website_id=self.website_id,
            site=self.site,
            search_url=search_url,
            keywords_used=keywords_used,
            location_used=location_used,
        )
        return message.idempotency_key, encode_job(message).decode()


def decode_job(body: bytes | str) -> JobMessage:
    """Parse and validate a job message; :class:`MessageError` (and nothing else) says what is wrong."""
    if isinstance(body, str):
        try:
            body = body.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise MessageError(f"job message is not valid UTF-8: {exc}") from None
    if not isinstance(body, bytes | bytearray | memoryview):
        raise MessageError(f"job message body must be bytes, got {type(body).__name__}")
    if len(body) > MAX_BODY_BYTES:
        raise MessageError(f"job message is {len(body):,} bytes: larger than the {MAX_BODY_BYTES:,}-byte limit")
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MessageError(f"job message is not valid UTF-8: {exc}") from None
    depth = _nesting(text)
    if depth > MAX_DEPTH:
        raise MessageError(f"job message nests deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise MessageError(f"job message is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MessageError(f"job message must be a JSON object, got {type(data).__name__}")
    version = data.get("schema_version")
    if version is None:
        raise MessageError("job message has no schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version not in SUPPORTED_VERSIONS:
        raise MessageError(
            f"unknown job message schema_version {version!r}; this crawlherd understands "
            f"{', '.join(str(v) for v in sorted(SUPPORTED_VERSIONS))}"
        )
    try:
        return JobMessage.model_validate(data)
    except ValidationError as exc:
        raise MessageError(f"invalid job message (schema_version {version}): {_problems(exc)}") from None
    except MessageError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError, OverflowError) as exc:
        # a validator tripping over a value of the wrong type
        raise MessageError(f"invalid job message (schema_version {version}): {type(exc).__name__}: {exc}") from None


def _no_constant(name: str) -> float:
    """``NaN`` and ``Infinity`` are Python's extension, not JSON: encoded again they would not be
    the message that came in."""
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"the number {text[:40]} is too large")
    return value


def _nesting(text: str) -> int:
    """How deep ``text``'s JSON arrays and objects nest (brackets inside strings are skipped): checked
    before :func:`json.loads`, which would recurse that deep."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        elif ch in "]}":
            depth -= 1
    return deepest


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'message'}: {err['msg']}" for err in exc.errors())
