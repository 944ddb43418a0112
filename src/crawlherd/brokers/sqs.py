"""``sqs://<queue>?region=eu-west-1``: a broker on Amazon SQS, standard or FIFO queues (aiobotocore).

The URL names the queue; a name ending in ``.fifo`` is a FIFO queue. Credentials come from the usual AWS
chain (environment, shared config, instance or task role), or from the URL: ``sqs://KEY:SECRET@queue``.
Beside the queue lives its dead-letter queue, ``<queue>-dead`` (``<name>-dead.fifo`` for FIFO queues).

Wire format (so that other SQS tools can read it): the body is the published bytes as text when they are
UTF-8 that SQS accepts (JSON job messages are), else base64 with the attribute ``x-crawlherd-encoding``.
Message attributes: ``x-crawlherd-key`` (the idempotency key), ``x-crawlherd-headers`` (the headers, as a
JSON object), ``x-crawlherd-not-before`` (due time, epoch seconds, for delays SQS cannot hold itself), and on
the dead-letter queue ``x-crawlherd-reason`` and ``x-crawlherd-dead-at``. A message without a key (put on
the queue by another tool) is delivered with its SQS message id as its key.

Guarantees and how they are kept:

- ``publish`` returns once SQS answered ``SendMessageBatch`` with the message among the successful
  entries (SQS stores a message redundantly before it answers). Publishes made concurrently are sent in
  batches of up to ten; deletes and visibility changes too.
- FIFO queues: ``MessageDeduplicationId`` is the key, so a message the relay publishes again under the
  same key within SQS's five-minute window is dropped by SQS itself. ``MessageGroupId`` is the key too
  (jobs are independent, so one slow job never holds up the others) unless ``message_group`` names one
  group for every message (strict order, one message in flight at a time).
- A received message is invisible to other consumers for ``visibility_timeout`` seconds; while a delivery
  is held, a heartbeat extends it every ``heartbeat`` seconds, so a long job keeps its message. A
  consumer that dies stops extending: its messages come back after ``visibility_timeout`` with
  ``redelivered=True`` (from ``ApproximateReceiveCount``). A settle that comes after the lease ran out
  raises BrokerError (the message may be with another consumer by then).
- ``ack`` deletes the message; ``nack(requeue=True)`` makes it visible at once; ``retry`` sends a new
  message (same key and headers) then deletes the old one, ``dead_letter`` sends it to the dead-letter
  queue then deletes it: a crash between the two leaves a duplicate (dropped by the worker's idempotency
  check, and by SQS's deduplication on FIFO queues), never a loss.
- Delays: standard queues use ``DelaySeconds`` up to SQS's 15-minute cap; a longer delay travels in
  ``x-crawlherd-not-before`` and a consumer that receives the message early publishes it again with the
  remaining delay (capped again) and deletes the early copy. FIFO queues take no per-message delay: the
  message carries ``x-crawlherd-not-before`` and the consumer that receives it early hides it (visibility
  timeout, at most 15 minutes at a time, then a fresh copy) until it is due.
- ``max_deliveries`` sets the queue's redrive policy (``maxReceiveCount``): SQS itself moves a message
  received that many times without being deleted to the dead-letter queue; such dead letters carry the
  reason ``received more than maxReceiveCount times (SQS redrive policy)``.
- ``dead_letters()`` and ``requeue_dead()`` read the dead-letter queue by receiving its messages (SQS has
  no way to look without receiving) and making them visible again at once; a listing taken while another
  process reads the dead-letter queue can miss the messages that process holds.

Options (URL query or keywords): :class:`SQSBrokerOptions`. ``client=``: a live aiobotocore SQS client to use
instead of opening one; it is not closed by :meth:`close`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import unquote, urlsplit

import aiohttp
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
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
from crawlherd.brokers._common import BrokerBase, BrokerOptions, build_options, check_delay, check_publish, log
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import BackendUnavailableError, BrokerError, ConfigurationError, PublishError

__all__ = ["SQSBroker", "SQSBrokerOptions"]

MAX_DELAY = 900  # SQS: DelaySeconds <= 15 minutes
MAX_BATCH = 10  # SQS: entries per batch call
MAX_BATCH_BYTES = 256 * 1024  # SQS: payload of one SendMessageBatch (kept at the historical limit)
_LIST_CAP = 1000  # dead letters looked at by one dead_letters()/requeue_dead() call

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
_REDRIVE_REASON = "received more than maxReceiveCount times (SQS redrive policy)"


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
    visibility_timeout: Annotated[int, Ge(1), Le(43200)] = 30
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
class _Lease:
    handle: str  # the receipt handle of this receive
    deadline: float  # monotonic time when the message becomes visible again unless extended


def _queue_names(name: str, dead_queue: str | None) -> tuple[str, str, bool]:
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


def _hash_id(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def _encode_body(body: bytes) -> tuple[str, bool]:
    """The SQS message body for ``body``, and whether it is base64."""
    try:
        text = body.decode()
    except UnicodeDecodeError:
        text = None
    if text is not None and text and not _BAD_TEXT.search(text):
        return text, False
    return base64.b64encode(body).decode(), True


class _Batcher:
    """Gathers the calls made in one event-loop turn into batch calls of at most ten entries.

    ``call(entries)`` is the batch API (``SendMessageBatch``...); each ``submit`` waits for its own entry's
    outcome: None, or the ``Failed`` entry of the answer. A failure of the whole call is raised in every
    waiter of that call.
    """

    def __init__(self, name: str, call: Callable[[list[dict[str, Any]]], Awaitable[dict[str, Any]]]) -> None:
        self._name = name
        self._call = call
        self._queued: list[tuple[dict[str, Any], int, asyncio.Future[dict[str, Any] | None]]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, entry: dict[str, Any], size: int = 0) -> dict[str, Any] | None:
        fut: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._queued.append((entry, size, fut))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush(), name=f"sqs-batch-{self._name}")
        return await fut

    async def _flush(self) -> None:
        await asyncio.sleep(0)  # let the other calls of this turn queue up
        queued, self._queued, self._flusher = self._queued, [], None
        chunks: list[list[tuple[dict[str, Any], int, asyncio.Future[dict[str, Any] | None]]]] = [[]]
        used = 0
        for item in queued:
            if item[2].done():  # its waiter was cancelled before we sent it
                continue
            if len(chunks[-1]) == MAX_BATCH or (chunks[-1] and used + item[1] > MAX_BATCH_BYTES):
                chunks.append([])
                used = 0
            chunks[-1].append(item)
            used += item[1]
        for chunk in chunks:
            if chunk:
                task = asyncio.create_task(self._send(chunk), name=f"sqs-batch-{self._name}-send")
                self._running.add(task)
                task.add_done_callback(self._running.discard)

    async def _send(self, chunk: list[tuple[dict[str, Any], int, asyncio.Future[dict[str, Any] | None]]]) -> None:
        entries = [{**entry, "Id": str(i)} for i, (entry, _, _) in enumerate(chunk)]
        try:
            answer = await self._call(entries)
        except BaseException as exc:
            for _, _, fut in chunk:
                if not fut.done():
                    fut.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        failed = {f["Id"]: f for f in answer.get("Failed", [])}
        for i, (_, _, fut) in enumerate(chunk):
            if not fut.done():
                fut.set_result(failed.get(str(i)))

    async def aclose(self) -> None:
        tasks = [t for t in (self._flusher, *self._running) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for _, _, fut in self._queued:
            if not fut.done():
                fut.set_exception(BrokerError("the sqs broker was closed before this batch was sent"))
        self._queued.clear()


class SQSBroker(BrokerBase):
    """A broker on an Amazon SQS queue (standard or FIFO); see the module docstring."""

    backend = "sqs"
    shorter_than = (("heartbeat", "visibility_timeout"), ("wait_time", "read_timeout"))

    def __init__(self, url: str = "sqs://crawlherd-jobs", *, client: Any | None = None,
                 options: SQSBrokerOptions | None = None) -> None:
        super().__init__()
        self.options = opts = options or SQSBrokerOptions()
        parts = urlsplit(url)
        # the queue name as written (urlsplit's hostname is lower-cased)
        name = unquote(parts.netloc.rsplit("@", 1)[-1])
        if not name:
            raise ConfigurationError(f"sqs broker URL {redact_url(url)!r} names no queue: use sqs://<queue-name>")
        self.queue, self.dead_queue, self.fifo = _queue_names(name, opts.dead_queue)
        if opts.message_group and not self.fifo:
            raise ConfigurationError("sqs broker option message_group is for FIFO queues (names ending in '.fifo')")
        self._key_id = unquote(parts.username) if parts.username else None
        self._secret = unquote(parts.password) if parts.password else None
        if (self._key_id is None) != (self._secret is None):
            raise ConfigurationError("sqs broker URL: give both the access key id and the secret (sqs://KEY:SECRET@queue)")
        self._display = f"sqs://{self.queue}" + (f" at {redact_url(opts.endpoint_url)}" if opts.endpoint_url else "")
        self._given_client = client
        self._client: Any | None = None
        self._client_ctx: Any | None = None
        self._url = ""
        self._dead_url = ""
        self._leases: dict[str, _Lease] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._batchers: dict[str, _Batcher] = {}

    @classmethod
    def from_url(cls, url: str, *, client: Any | None = None, **options: Any) -> SQSBroker:
        return cls(url, client=client, options=build_options(SQSBrokerOptions, url, options, backend="sqs"))

    def _describe(self) -> str:
        return self._display

    # -- plumbing ----------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        return self._live(self._client)

    async def _call(self, op: str, *, publishing: bool = False, **params: Any) -> dict[str, Any]:
        """``client.<op>(**params)`` with driver errors translated (see crawlherd.errors)."""
        if not self._opened and self._client is None:
            await self._ensure_open()
        fn = getattr(self.client, op)
        try:
            answer: dict[str, Any] = await fn(**params)
            return answer
        except _UNAVAILABLE as exc:
            raise BackendUnavailableError(f"{self!r}: SQS cannot be reached: {redact_url(str(exc))}",
                                          backend="sqs") from exc
        except NoCredentialsError as exc:
            raise ConfigurationError(
                f"{self!r}: no AWS credentials; set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (or a profile or role), "
                "or give them in the URL as sqs://KEY:SECRET@queue") from exc
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _THROTTLED:
                raise BackendUnavailableError(f"{self!r}: SQS is unavailable ({code}): {exc}", backend="sqs") from exc
            if code in _GONE:
                raise BrokerError(f"{self!r}: the queue does not exist (deleted under us?): {exc}") from exc
            raise (PublishError if publishing else BrokerError)(f"{self!r}: {exc}") from exc
        except BotoCoreError as exc:
            raise (PublishError if publishing else BrokerError)(f"{self!r}: {exc}") from exc

    def _batcher(self, op: str, url: str) -> _Batcher:
        key = f"{op}:{url}"
        batcher = self._batchers.get(key)
        if batcher is None:
            async def call(entries: list[dict[str, Any]]) -> dict[str, Any]:
                return await self._call(op, publishing=op == "send_message_batch", QueueUrl=url, Entries=entries)

            batcher = self._batchers[key] = _Batcher(op, call)
        return batcher

    async def _open(self) -> None:
        opts = self.options
        try:
            if self._given_client is not None:
                self._client = self._given_client
            else:
                session = get_session()
                region = opts.region or session.get_config_variable("region")
                if not region:
                    raise ConfigurationError(f"{self!r}: no AWS region; give ?region=... in the URL or set AWS_REGION")
                config = AioConfig(connect_timeout=opts.connect_timeout,
                                   read_timeout=opts.read_timeout or opts.wait_time + 10,
                                   retries={"max_attempts": opts.max_attempts, "mode": "standard"})
                self._client_ctx = session.create_client(
                    "sqs", region_name=region, endpoint_url=opts.endpoint_url or None,
                    aws_access_key_id=self._key_id, aws_secret_access_key=self._secret, config=config)
                self._client = await self._client_ctx.__aenter__()
            self._dead_url = await self._queue_url(self.dead_queue)
            redrive: dict[str, str] = {}
            if opts.max_deliveries:
                attrs = await self._call("get_queue_attributes", QueueUrl=self._dead_url, AttributeNames=["QueueArn"])
                redrive["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": attrs["Attributes"]["QueueArn"],
                                                       "maxReceiveCount": opts.max_deliveries})
            self._url = await self._queue_url(self.queue)
            if redrive:
                await self._call("set_queue_attributes", QueueUrl=self._url, Attributes=redrive)
        except BaseException:
            await self._shutdown()
            raise
        self._heartbeat_task = asyncio.create_task(self._heartbeat(), name=f"sqs-heartbeat-{self.queue}")

    async def _queue_url(self, name: str) -> str:
        if self.options.create:
            attrs = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
            answer = await self._call("create_queue", QueueName=name, Attributes=attrs)
            return str(answer["QueueUrl"])
        try:
            answer = await self._call("get_queue_url", QueueName=name)
        except BrokerError as exc:
            raise ConfigurationError(f"{self!r}: queue {name!r} does not exist; create it (with its dead-letter "
                                     "queue) or pass create=true") from exc
        return str(answer["QueueUrl"])

    async def _shutdown(self) -> None:
        task, self._heartbeat_task = self._heartbeat_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        batchers, self._batchers = list(self._batchers.values()), {}
        for batcher in batchers:
            await batcher.aclose()
        self._leases.clear()
        ctx, self._client_ctx = self._client_ctx, None
        self._client = None
        if ctx is not None:
            try:
                await ctx.__aexit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - closing anyway
                log.debug("%r: error while closing the SQS client: %s", self, exc)

    # -- messages ----------------------------------------------------------------------------------

    def _entry(self, body: bytes, key: str, headers: Mapping[str, str], *, fifo: bool, dedup: str,
               not_before: float | None = None, delay: int = 0,
               extra: Mapping[str, str] | None = None) -> tuple[dict[str, Any], int]:
        text, b64 = _encode_body(body)
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
            entry["MessageGroupId"] = self.options.message_group or (key if _DEDUP_ID.match(key) else _hash_id(key))
            entry["MessageDeduplicationId"] = dedup if _DEDUP_ID.match(dedup) else _hash_id(dedup)
        elif delay:
            entry["DelaySeconds"] = delay
        size = len(text.encode()) + sum(len(n) + len(v["StringValue"].encode()) + 6 for n, v in attrs.items())
        return entry, size

    def _timing(self, delay: float) -> tuple[float | None, int]:
        """(not-before epoch time or None, DelaySeconds) for a message due in ``delay`` seconds."""
        if delay <= 0:
            return None, 0
        if self.fifo:
            return time.time() + delay, 0
        if delay <= MAX_DELAY:
            return None, max(1, math.ceil(delay))
        return time.time() + delay, MAX_DELAY

    async def _send(self, url: str, entry: dict[str, Any], size: int, *, publishing: bool = True) -> None:
        failed = await self._batcher("send_message_batch", url).submit(entry, size)
        if failed is not None:
            cls = PublishError if publishing else BrokerError
            raise cls(f"{self!r}: SQS refused the message ({failed.get('Code')}): {failed.get('Message')}")

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = check_publish(body, key, headers, delay)
        await self._ensure_open()
        not_before, delay_s = self._timing(delay)
        entry, size = self._entry(bytes(body), key, hdrs, fifo=self.fifo, dedup=key, not_before=not_before,
                                  delay=delay_s)
        await self._send(self._url, entry, size)

    @staticmethod
    def _attr(msg: Mapping[str, Any], name: str) -> str | None:
        value = msg.get("MessageAttributes", {}).get(name)
        return None if value is None else str(value.get("StringValue", ""))

    def _decode(self, msg: Mapping[str, Any]) -> tuple[bytes, str, dict[str, str]]:
        """(body, key, headers) of a received message."""
        text = str(msg.get("Body", ""))
        body = text.encode()
        if self._attr(msg, A_ENCODING) == "base64":
            try:
                body = base64.b64decode(text, validate=True)
            except (binascii.Error, ValueError):
                log.warning("%r: message %s says base64 but is not; delivered as text", self, msg.get("MessageId"))
        key = self._attr(msg, A_KEY) or str(msg["MessageId"])
        raw_headers = self._attr(msg, A_HEADERS)
        headers: dict[str, str] = {}
        if raw_headers:
            try:
                parsed = json.loads(raw_headers)
                headers = {str(k): str(v) for k, v in parsed.items()}
            except (ValueError, AttributeError):
                log.warning("%r: message %s has unreadable headers; dropped", self, msg.get("MessageId"))
        return body, key, headers

    # -- consume -----------------------------------------------------------------------------------

    async def _receive(self, url: str, n: int, *, wait: int, visibility: int) -> list[dict[str, Any]]:
        answer = await self._call(
            "receive_message", QueueUrl=url, MaxNumberOfMessages=max(1, min(n, MAX_BATCH)), WaitTimeSeconds=wait,
            VisibilityTimeout=visibility, MessageAttributeNames=["All"],
            MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"])
        return list(answer.get("Messages", []))

    async def _fetch(self, state: Any, n: int) -> Sequence[Delivery]:
        opts = self.options
        started = time.monotonic()
        messages = await self._receive(self._url, n, wait=opts.wait_time, visibility=opts.visibility_timeout)
        out: list[Delivery] = []
        for msg in messages:
            not_before = self._attr(msg, A_NOT_BEFORE)
            if not_before is not None and float(not_before) > time.time():
                await self._postpone(msg, float(not_before))
                continue
            body, key, headers = self._decode(msg)
            count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            delivery_id = f"{msg['MessageId']}:{count}:{msg['ReceiptHandle'][-8:]}"
            self._leases[delivery_id] = _Lease(msg["ReceiptHandle"], started + opts.visibility_timeout)
            out.append(Delivery(body, key, delivery_id, count > 1, headers, raw=msg))
        return out

    async def _postpone(self, msg: Mapping[str, Any], not_before: float) -> None:
        """A message received before it is due goes back until it is (see the module docstring)."""
        remaining = max(1, math.ceil(not_before - time.time()))
        count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        if self.fifo and count <= 1:
            await self._visibility(self._url, msg["ReceiptHandle"], min(remaining, MAX_DELAY))
            return
        body, key, headers = self._decode(msg)
        keep_not_before = not_before if (self.fifo or remaining > MAX_DELAY) else None
        entry, size = self._entry(body, key, headers, fifo=self.fifo, dedup=_hash_id(key, "hop", msg["MessageId"]),
                                  not_before=keep_not_before, delay=min(remaining, MAX_DELAY))
        await self._send(self._url, entry, size, publishing=False)
        await self._delete(self._url, msg["ReceiptHandle"])

    async def _heartbeat(self) -> None:
        """Extend the visibility of every message this broker holds, so that long jobs keep them."""
        opts = self.options
        while True:
            await asyncio.sleep(opts.heartbeat_interval)
            now = time.monotonic()
            held = [(d_id, lease) for d_id, lease in self._leases.items() if lease.deadline > now]
            if not held:
                continue

            async def extend(d_id: str, lease: _Lease) -> None:
                started = time.monotonic()
                try:
                    failed = await self._batcher("change_message_visibility_batch", self._url).submit(
                        {"ReceiptHandle": lease.handle, "VisibilityTimeout": opts.visibility_timeout})
                except (BrokerError, BackendUnavailableError) as exc:
                    log.warning("%r: could not extend the visibility of %s: %s", self, d_id, exc)
                    return
                if failed is None:
                    lease.deadline = started + opts.visibility_timeout
                else:  # not in flight any more under this handle: the lease is lost
                    log.warning("%r: lost the lease of %s (%s)", self, d_id, failed.get("Code"))
                    lease.deadline = 0.0

            await asyncio.gather(*(extend(d_id, lease) for d_id, lease in held))

    # -- settle ------------------------------------------------------------------------------------

    def _settling(self, delivery: Delivery) -> _Lease:
        """Take ``delivery`` for settling: raises BrokerError when not held or its lease ran out."""
        self._take(delivery)
        lease = self._leases.pop(delivery.delivery_id, None)
        if lease is None or lease.deadline <= time.monotonic():
            raise BrokerError(
                f"delivery {delivery.delivery_id} (key {delivery.key!r}): its visibility timeout ran out "
                "before it was settled, so SQS may have delivered it to another consumer")
        return lease

    def _unsettle(self, delivery: Delivery, lease: _Lease) -> None:
        self._untake(delivery)
        if not self._closed:
            self._leases[delivery.delivery_id] = lease

    async def _delete(self, url: str, handle: str) -> None:
        failed = await self._batcher("delete_message_batch", url).submit({"ReceiptHandle": handle})
        if failed is not None:
            raise BrokerError(f"{self!r}: SQS did not delete the message ({failed.get('Code')}): "
                              f"{failed.get('Message')}")

    async def _visibility(self, url: str, handle: str, seconds: int) -> None:
        failed = await self._batcher("change_message_visibility_batch", url).submit(
            {"ReceiptHandle": handle, "VisibilityTimeout": seconds})
        if failed is not None:
            raise BrokerError(f"{self!r}: SQS did not change the message's visibility ({failed.get('Code')}): "
                              f"{failed.get('Message')}")

    async def _settle(self, delivery: Delivery, steps: Callable[[_Lease], Awaitable[None]]) -> None:
        lease = self._settling(delivery)
        try:
            await steps(lease)
        except BackendUnavailableError:
            self._unsettle(delivery, lease)
            raise

    async def ack(self, delivery: Delivery) -> None:
        await self._settle(delivery, lambda lease: self._delete(self._url, lease.handle))

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        await self._settle(delivery, lambda lease: self._visibility(self._url, lease.handle, 0))

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        check_delay(delay)
        if body is not None:
            check_publish(body, delivery.key, None, delay)
        message_id = str(delivery.raw["MessageId"]) if isinstance(delivery.raw, Mapping) else delivery.delivery_id

        async def steps(lease: _Lease) -> None:
            not_before, delay_s = self._timing(delay)
            entry, size = self._entry(bytes(delivery.body if body is None else body), delivery.key,
                                      delivery.headers, fifo=self.fifo,
                                      dedup=_hash_id(delivery.key, "retry", message_id),
                                      not_before=not_before, delay=delay_s)
            await self._send(self._url, entry, size, publishing=False)
            await self._delete(self._url, lease.handle)

        await self._settle(delivery, steps)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        message_id = str(delivery.raw["MessageId"]) if isinstance(delivery.raw, Mapping) else delivery.delivery_id

        async def steps(lease: _Lease) -> None:
            entry, size = self._entry(delivery.body, delivery.key, delivery.headers, fifo=self.fifo,
                                      dedup=_hash_id(delivery.key, "dead", message_id),
                                      extra={A_REASON: reason or "dead-lettered", A_DEAD_AT: repr(time.time())})
            await self._send(self._dead_url, entry, size, publishing=False)
            await self._delete(self._url, lease.handle)

        await self._settle(delivery, steps)

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        now = time.monotonic()
        handles = []
        for d in deliveries:
            lease = self._leases.pop(d.delivery_id, None)
            if lease is not None and lease.deadline > now:  # a lost lease may be another consumer's now
                handles.append(lease.handle)
        results = await asyncio.gather(*(self._visibility(self._url, h, 0) for h in handles), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise errors[0]

    # -- dead letters ------------------------------------------------------------------------------

    async def _dead_batch(self) -> list[dict[str, Any]]:
        """Every dead letter (up to a cap), received and so held invisible; oldest first."""
        held: list[dict[str, Any]] = []
        seen: set[str] = set()
        while len(held) < _LIST_CAP:
            got = await self._receive(self._dead_url, MAX_BATCH, wait=0, visibility=max(30, self.options.wait_time))
            fresh = [m for m in got if m["MessageId"] not in seen]
            if not fresh:
                await self._give_back(got)
                break
            seen.update(m["MessageId"] for m in fresh)
            held.extend(fresh)

        def order(m: Mapping[str, Any]) -> tuple[float, int]:
            at = self._attr(m, A_DEAD_AT)
            return (float(at) if at else int(m.get("Attributes", {}).get("SentTimestamp", "0")) / 1000,
                    int(m.get("Attributes", {}).get("SentTimestamp", "0")))

        held.sort(key=order)
        return held

    async def _give_back(self, messages: Sequence[Mapping[str, Any]]) -> None:
        results = await asyncio.gather(*(self._visibility(self._dead_url, m["ReceiptHandle"], 0) for m in messages),
                                       return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.debug("%r: a dead letter comes back after its visibility timeout: %s", self, r)

    def _dead_letter_of(self, msg: Mapping[str, Any]) -> DeadLetter:
        body, key, headers = self._decode(msg)
        at = self._attr(msg, A_DEAD_AT)
        return DeadLetter(body, key, self._attr(msg, A_REASON) or _REDRIVE_REASON, str(msg["MessageId"]),
                          float(at) if at else None, headers)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        await self._ensure_open()
        held = await self._dead_batch()
        try:
            return [self._dead_letter_of(m) for m in held[:limit]]
        finally:
            await self._give_back(held)

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        await self._ensure_open()
        held = await self._dead_batch()
        chosen = [m for m in held if dead_id is None or m["MessageId"] == dead_id]
        rest = [m for m in held if m not in chosen]
        moved = 0
        try:
            for msg in chosen:
                body, key, headers = self._decode(msg)
                entry, size = self._entry(body, key, headers, fifo=self.fifo,
                                          dedup=_hash_id(key, "requeue", str(msg["MessageId"])))
                await self._send(self._url, entry, size, publishing=False)
                await self._delete(self._dead_url, msg["ReceiptHandle"])
                moved += 1
        finally:
            await self._give_back(rest + chosen[moved:])
        return moved

    async def pending(self) -> int:
        await self._ensure_open()
        answer = await self._call("get_queue_attributes", QueueUrl=self._url,
                                  AttributeNames=["ApproximateNumberOfMessages"])
        return int(answer["Attributes"]["ApproximateNumberOfMessages"])


if TYPE_CHECKING:
    _conforms: type[Broker] = SQSBroker
