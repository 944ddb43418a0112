"""The SQS broker's wire: its options, queue names, how a message is encoded into SQS's entries and
read back, how botocore's errors map to crawlherd's, and the process's botocore session (see
:mod:`crawlherd.brokers.sqs`).

Wire format (so that other SQS tools can read it): the body is the published bytes as text when they are
UTF-8 that SQS accepts (JSON job messages are), else base64 with the attribute ``x-crawlherd-encoding``.
Message attributes: ``x-crawlherd-key`` (the idempotency key), ``x-crawlherd-headers`` (the headers, as a
JSON object), ``x-crawlherd-not-before`` (due time, epoch seconds, for delays SQS cannot hold itself), and on
the dead-letter queue ``x-crawlherd-reason`` and ``x-crawlherd-dead-at``. A message without a key (put on
the queue by another tool) is delivered with its SQS message id as its key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any

import aiohttp
from aiobotocore.session import AioSession, get_session
from annotated_types import Ge, Le
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from crawlherd._options import AtLeast0, Count, Delay, Seconds
from crawlherd._redact import redact_url
from crawlherd.brokers._common import BrokerOptions, log, unavailable
from crawlherd.errors import BrokerError, ConfigurationError, PublishError

MAX_DELAY = 900  # SQS: DelaySeconds <= 15 minutes
MAX_BATCH = 10  # SQS: entries per batch call
MAX_BATCH_BYTES = 256 * 1024  # SQS: payload of one SendMessageBatch (kept at the historical limit)
LIST_CAP = 1000  # dead letters looked at by one dead_letters()/requeue_dead() call

A_KEY = "x-crawlherd-key"
A_HEADERS = "x-crawlherd-headers"
A_ENCODING = "x-crawlherd-encoding"
A_NOT_BEFORE = "x-crawlherd-not-before"
A_REASON = "x-crawlherd-reason"
A_DEAD_AT = "x-crawlherd-dead-at"
_CARRIED = (A_KEY, A_HEADERS, A_ENCODING)  # what a message keeps when it moves between queues

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
# characters SQS accepts in a message body (XML 1.0 characters)
_BAD_TEXT = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_DEDUP_ID = re.compile(r"^[!-~]{1,128}$")
_UNAVAILABLE = (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError,
                aiohttp.ClientError, OSError, asyncio.TimeoutError)
_THROTTLED = {"Throttling", "ThrottlingException", "RequestThrottled", "ServiceUnavailable",
              "InternalError", "InternalFailure", "KmsThrottled"}
_GONE = {"AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"}
REDRIVE_REASON = "received more than maxReceiveCount times (SQS redrive policy)"


@dataclass(frozen=True)
class SQSBrokerOptions(BrokerOptions):
    """``region`` (default: the AWS config chain); ``endpoint_url`` of an SQS-compatible server;
    ``dead_queue``: the dead-letter queue's name; ``create`` missing queues; ``visibility_timeout``
    (whole seconds) and the ``heartbeat`` that extends it while a job runs (0: ``visibility_timeout /
    3``); ``wait_time`` of a long poll (whole seconds); ``max_deliveries`` (0: no redrive policy);
    ``message_group`` (FIFO queues only; default: per message); ``connect_timeout``; ``read_timeout``
    (0: ``wait_time + 10``); ``max_attempts``: botocore's attempts per call."""

    backend = "sqs"
    shorter_than = (("heartbeat", "visibility_timeout"), ("wait_time", "read_timeout"))

    region: str | None = None
    endpoint_url: str | None = None
    dead_queue: str | None = None
    create: bool = True
    visibility_timeout: Annotated[int, Ge(1), Le(43200)] = 15
    heartbeat: Delay = 0.0
    wait_time: Annotated[int, Ge(0), Le(20)] = 20
    max_deliveries: AtLeast0 = 0
    message_group: str | None = None
    connect_timeout: Seconds = 5.0
    read_timeout: Delay = 0.0
    max_attempts: Count = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.message_group and not _DEDUP_ID.match(self.message_group):
            raise ConfigurationError(
                f"sqs broker option message_group={self.message_group!r}: 1-128 printable ASCII characters")

    @property
    def heartbeat_interval(self) -> float:
        return self.heartbeat or self.visibility_timeout / 3


@dataclass(slots=True)
class Lease:
    """A received message held by this broker."""

    handle: str  # the receipt handle of this receive
    deadline: float  # monotonic time when the message becomes visible again unless extended


def queue_names(name: str, dead_queue: str | None) -> tuple[str, str, bool]:
    fifo = name.endswith(".fifo")
    base = name[: -len(".fifo")] if fifo else name
    dead = dead_queue or f"{base}-dead" + (".fifo" if fifo else "")
    for label, queue in (("queue", name), ("dead-letter queue", dead)):
        stem = queue[: -len(".fifo")] if queue.endswith(".fifo") else queue
        if not _QUEUE_NAME.match(stem) or len(queue) > 80:
            raise ConfigurationError(
                f"sqs broker: {label} name {queue!r} is not a valid SQS queue name (1-80 characters: letters, "
                "digits, '-' and '_'; FIFO queues end in '.fifo')")
    if dead.endswith(".fifo") != fifo:
        raise ConfigurationError(f"sqs broker: the dead-letter queue {dead!r} must be of the same kind as {name!r}"
                                 " (FIFO queues end in '.fifo')")
    return name, dead, fifo


def hash_id(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def encode_body(body: bytes) -> tuple[str, bool]:
    """The SQS message body for ``body``, and whether it is base64."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and text and not _BAD_TEXT.search(text):
        return text, False
    return base64.b64encode(body).decode(), True


def timing(delay: float, *, fifo: bool) -> tuple[float | None, int]:
    """(not-before epoch time or None, DelaySeconds) for a message due in ``delay`` seconds."""
    if delay <= 0:
        return None, 0
    if fifo:
        return time.time() + delay, 0
    if delay <= MAX_DELAY:
        return None, max(1, math.ceil(delay))
    return time.time() + delay, MAX_DELAY


def make_entry(body: bytes, key: str, headers: Mapping[str, str], *, fifo: bool, dedup: str,
               message_group: str | None = None, not_before: float | None = None, delay: int = 0,
               extra: Mapping[str, str] | None = None) -> tuple[dict[str, Any], int]:
    """The ``SendMessageBatch`` entry of a message, and its size as SQS counts it (body + attributes)."""
    text, b64 = encode_body(body)
    attrs: dict[str, dict[str, str]] = {A_KEY: {"DataType": "String", "StringValue": key}}
    if headers:
        attrs[A_HEADERS] = {"DataType": "String", "StringValue": json.dumps(dict(headers), ensure_ascii=False)}
    if b64:
        attrs[A_ENCODING] = {"DataType": "String", "StringValue": "base64"}
    if not_before is not None:
        attrs[A_NOT_BEFORE] = {"DataType": "Number", "StringValue": repr(round(not_before, 3))}
    for name, value in (extra or {}).items():
        attrs[name] = {"DataType": "String", "StringValue": value}
    entry: dict[str, Any] = {"MessageBody": text, "MessageAttributes": attrs}
    if fifo:
        entry["MessageGroupId"] = message_group or (key if _DEDUP_ID.match(key) else hash_id(key))
        entry["MessageDeduplicationId"] = dedup if _DEDUP_ID.match(dedup) else hash_id(dedup)
    elif delay:
        entry["DelaySeconds"] = delay
    size = len(text.encode()) + sum(len(n) + len(v["StringValue"].encode()) + 6 for n, v in attrs.items())
    return entry, size


def attr(msg: Mapping[str, Any], name: str) -> str | None:
    """The message attribute ``name`` of a received message, or None."""
    value = msg.get("MessageAttributes", {}).get(name)
    return None if value is None else str(value.get("StringValue", ""))


def decode(msg: Mapping[str, Any], where: object) -> tuple[bytes, str, dict[str, str]]:
    """(body, key, headers) of a received message (``where``: the broker, for the log)."""
    text = str(msg.get("Body", ""))
    body = text.encode()
    if attr(msg, A_ENCODING) == "base64":
        try:
            body = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            log.warning("%r: message %s says base64 but is not; delivered as text", where, msg.get("MessageId"))
    key = attr(msg, A_KEY) or str(msg["MessageId"])
    raw_headers = attr(msg, A_HEADERS)
    headers: dict[str, str] = {}
    if raw_headers:
        try:
            parsed = json.loads(raw_headers)
            headers = {str(k): str(v) for k, v in parsed.items()}
        except (ValueError, AttributeError):
            log.warning("%r: message %s has unreadable headers; dropped", where, msg.get("MessageId"))
    return body, key, headers


@contextmanager
def driver_errors(where: object, *, publishing: bool = False) -> Iterator[None]:
    """botocore's (and aiohttp's) errors as crawlherd's: the one place the SQS broker decides what is an
    outage -- no connection, a timeout, or SQS saying it is throttling or failing inside (by the error
    code of its answer) -- and what is a refusal."""
    try:
        yield
    except _UNAVAILABLE as exc:
        raise unavailable(f"{where!r}: SQS cannot be reached: {redact_url(str(exc))}", backend="sqs") from exc
    except NoCredentialsError as exc:
        raise ConfigurationError(
            f"{where!r}: no AWS credentials; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or a profile or role), "
            "or give them in the URL as sqs://KEY:SECRET@queue") from exc
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in _THROTTLED:
            raise unavailable(f"{where!r}: SQS is unavailable ({code}): {exc}", backend="sqs") from exc
        if code in _GONE:
            raise BrokerError(f"{where!r}: the queue does not exist (deleted under us?): {exc}") from exc
        raise (PublishError if publishing else BrokerError)(f"{where!r}: {exc}") from exc
    except BotoCoreError as exc:
        raise (PublishError if publishing else BrokerError)(f"{where!r}: {exc}") from exc


@functools.cache
def aws_session() -> AioSession:
    """The process's botocore session, made on first use and shared by every broker: a new session reads
    botocore's endpoint and service data again (about 0.1 s of CPU for each broker opened). The region is
    read when a broker opens; credentials found by the session (when the URL gives none) are kept for the
    process, as boto3's default session keeps them (refreshable ones refresh themselves)."""
    return get_session()
