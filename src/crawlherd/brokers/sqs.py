"""``sqs://<queue>?region=eu-west-1``: a broker on Amazon SQS, standard or FIFO queues (aiobotocore).

The URL names the queue; a name ending in ``.fifo`` is a FIFO queue. Credentials come from the usual AWS
chain (environment, shared config, instance or task role), or from the URL: ``sqs://KEY:SECRET@queue``.
Beside the queue lives its dead-letter queue, ``<queue>-dead`` (``<name>-dead.fifo`` for FIFO queues).

The wire format (body, attributes) is in :mod:`crawlherd.brokers._sqs_wire`.

Guarantees and how they are kept:

- ``publish`` returns once SQS answered ``SendMessageBatch`` with the message among the successful
  entries (SQS stores a message redundantly before it answers). Publishes made concurrently are sent in
  batches of up to ten; deletes and visibility changes too.
- FIFO queues: ``MessageDeduplicationId`` is the key, so a message the relay publishes again under the
  same key within SQS's five-minute window is dropped by SQS itself. ``MessageGroupId`` is the key too
  (jobs are independent, so one slow job never holds up the others) unless ``message_group`` names one
  group for every message (strict order, one message in flight at a time).
- A received message is invisible to other consumers for ``visibility_timeout`` seconds; while a delivery
  is held, a heartbeat extends it every ``heartbeat`` seconds, so a long job keeps its message (``lease``
  is None: the broker keeps its claims itself; ``touch`` extends one at once). A
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
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from aiobotocore.config import AioConfig

from crawlherd._redact import redact_url
from crawlherd._resilience import Batcher
from crawlherd.brokers._common import BrokerBase, build_options, check_delay, check_publish, log
from crawlherd.brokers._sqs_wire import (
    A_DEAD_AT,
    A_NOT_BEFORE,
    A_REASON,
    LIST_CAP,
    MAX_BATCH,
    MAX_BATCH_BYTES,
    MAX_DELAY,
    REDRIVE_REASON,
    Lease,
    SQSBrokerOptions,
    attr,
    aws_session,
    decode,
    driver_errors,
    hash_id,
    make_entry,
    queue_names,
    timing,
)
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import BackendUnavailableError, BrokerError, ConfigurationError, PublishError

__all__ = ["SQSBroker", "SQSBrokerOptions"]

#: Batch calls of one kind (send, delete, change visibility) out at once: botocore's connection pool
#: holds 10 connections by default, so more would only wait in it.
BATCH_CONCURRENCY = 10

_Entry = tuple[dict[str, Any], int]  # a batch entry (without its Id) and its size in bytes
_Outcome = dict[str, Any] | None  # None, or the entry's "Failed" item of SQS's answer


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
        self.queue, self.dead_queue, self.fifo = queue_names(name, opts.dead_queue)
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
        self._leases: dict[str, Lease] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._batchers: dict[str, Batcher[_Entry, _Outcome]] = {}

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
        """``client.<op>(**params)`` with driver errors translated (:func:`driver_errors`)."""
        if not self._opened and self._client is None:
            await self._ensure_open()
        fn = getattr(self.client, op)  # botocore's client: its operations are made at run time
        with driver_errors(self, publishing=publishing):
            answer: dict[str, Any] = await fn(**params)
        return answer

    def _batcher(self, op: str, url: str) -> Batcher[_Entry, _Outcome]:
        """The batcher of the batch call ``op`` on the queue at ``url``: the calls made while one is out
        go in the next, at most ten entries and 256 KiB a call (SQS's limits)."""
        key = f"{op}:{url}"
        batcher = self._batchers.get(key)
        if batcher is None:
            async def run(entries: list[_Entry]) -> list[_Outcome | BaseException]:
                answer = await self._call(op, publishing=op == "send_message_batch", QueueUrl=url,
                                          Entries=[{**entry, "Id": str(i)} for i, (entry, _) in enumerate(entries)])
                failed = {f["Id"]: f for f in answer.get("Failed", [])}
                return [failed.get(str(i)) for i in range(len(entries))]

            batcher = self._batchers[key] = Batcher(
                run, max_batch=MAX_BATCH, max_bytes=MAX_BATCH_BYTES, size=lambda e: e[1],
                concurrency=BATCH_CONCURRENCY, name=f"sqs-batch-{op}")
        return batcher

    async def _submit(self, op: str, url: str, entry: dict[str, Any], size: int = 0) -> _Outcome:
        """``entry``'s outcome in the next batch call ``op``; BrokerError when the broker is closed before
        the call was answered."""
        try:
            return await self._batcher(op, url)((entry, size))
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closed and task is not None and not task.cancelling():  # the batcher's close, not ours
                raise BrokerError(f"{self!r} was closed before this batch call was answered") from None
            raise

    async def _open(self) -> None:
        opts = self.options
        try:
            if self._given_client is not None:
                self._client = self._given_client
            else:
                session = aws_session()
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
            await batcher.close()
        self._leases.clear()
        ctx, self._client_ctx = self._client_ctx, None
        self._client = None
        if ctx is not None:
            try:
                await ctx.__aexit__(None, None, None)
            except Exception as exc:  # noqa: BLE001 - closing anyway
                log.debug("%r: error while closing the SQS client: %s", self, exc)

    # -- messages ----------------------------------------------------------------------------------

    def _entry(self, body: bytes, key: str, headers: Mapping[str, str], *, dedup: str,
               not_before: float | None = None, delay: int = 0,
               extra: Mapping[str, str] | None = None) -> tuple[dict[str, Any], int]:
        return make_entry(body, key, headers, fifo=self.fifo, dedup=dedup, message_group=self.options.message_group,
                          not_before=not_before, delay=delay, extra=extra)

    async def _send(self, url: str, entry: dict[str, Any], size: int, *, publishing: bool = True) -> None:
        failed = await self._submit("send_message_batch", url, entry, size)
        if failed is not None:
            cls = PublishError if publishing else BrokerError
            raise cls(f"{self!r}: SQS refused the message ({failed.get('Code')}): {failed.get('Message')}")

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = check_publish(body, key, headers, delay)
        await self._ensure_open()
        not_before, delay_s = timing(delay, fifo=self.fifo)
        entry, size = self._entry(bytes(body), key, hdrs, dedup=key, not_before=not_before,
                                  delay=delay_s)
        await self._send(self._url, entry, size)

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
            not_before = attr(msg, A_NOT_BEFORE)
            if not_before is not None and float(not_before) > time.time():
                await self._postpone(msg, float(not_before))
                continue
            body, key, headers = decode(msg, self)
            count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
            delivery_id = f"{msg['MessageId']}:{count}:{msg['ReceiptHandle'][-8:]}"
            self._leases[delivery_id] = Lease(msg["ReceiptHandle"], started + opts.visibility_timeout)
            out.append(Delivery(body, key, delivery_id, count > 1, headers, raw=msg))
        return out

    async def _postpone(self, msg: Mapping[str, Any], not_before: float) -> None:
        """A message received before it is due goes back until it is (see the module docstring)."""
        remaining = max(1, math.ceil(not_before - time.time()))
        count = int(msg.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        if self.fifo and count <= 1:
            await self._visibility(self._url, msg["ReceiptHandle"], min(remaining, MAX_DELAY))
            return
        body, key, headers = decode(msg, self)
        keep_not_before = not_before if (self.fifo or remaining > MAX_DELAY) else None
        entry, size = self._entry(body, key, headers, dedup=hash_id(key, "hop", msg["MessageId"]),
                                  not_before=keep_not_before, delay=min(remaining, MAX_DELAY))
        await self._send(self._url, entry, size, publishing=False)
        await self._delete(self._url, msg["ReceiptHandle"])

    async def _heartbeat(self) -> None:
        """Extend the visibility of every message this broker holds, so that long jobs keep them."""
        while True:
            await asyncio.sleep(self.options.heartbeat_interval)
            now = time.monotonic()
            held = [(d_id, lease) for d_id, lease in self._leases.items() if lease.deadline > now]

            async def extend(d_id: str, lease: Lease) -> None:
                try:
                    lost = await self._extend(lease)
                except (BrokerError, BackendUnavailableError) as exc:
                    log.warning("%r: could not extend the visibility of %s: %s", self, d_id, exc)
                    return
                if lost is not None:  # not in flight any more under this handle
                    log.warning("%r: lost the lease of %s (%s)", self, d_id, lost)

            await asyncio.gather(*(extend(d_id, lease) for d_id, lease in held))

    async def _extend(self, lease: Lease) -> str | None:
        """Make ``lease`` last another ``visibility_timeout``; None, or SQS's code when the lease is lost."""
        started = time.monotonic()
        seconds = self.options.visibility_timeout
        failed = await self._submit("change_message_visibility_batch", self._url,
                                    {"ReceiptHandle": lease.handle, "VisibilityTimeout": seconds})
        if failed is not None:
            lease.deadline = 0.0
            return str(failed.get("Code"))
        lease.deadline = started + seconds
        return None

    async def _touch(self, delivery: Delivery) -> None:
        """Extend the visibility of ``delivery`` at once (the heartbeat does it every ``heartbeat``
        seconds anyway, so ``lease`` is None); BrokerError when the lease was lost."""
        lease = self._leases.get(delivery.delivery_id)
        lost = "its visibility timeout ran out" if lease is None or lease.deadline <= time.monotonic() else (
            await self._extend(lease))
        if lost is not None:
            raise BrokerError(f"delivery {delivery.delivery_id} (key {delivery.key!r}): the lease was lost ({lost}); "
                              "SQS may have delivered it to another consumer")

    # -- settle ------------------------------------------------------------------------------------

    def _settling(self, delivery: Delivery) -> Lease:
        """Take ``delivery`` for settling: raises BrokerError when not held or its lease ran out."""
        self._take(delivery)
        lease = self._leases.pop(delivery.delivery_id, None)
        if lease is None or lease.deadline <= time.monotonic():
            raise BrokerError(
                f"delivery {delivery.delivery_id} (key {delivery.key!r}): its visibility timeout ran out "
                "before it was settled, so SQS may have delivered it to another consumer")
        return lease

    def _unsettle(self, delivery: Delivery, lease: Lease) -> None:
        self._untake(delivery)
        if not self._closed:
            self._leases[delivery.delivery_id] = lease

    async def _delete(self, url: str, handle: str) -> None:
        failed = await self._submit("delete_message_batch", url, {"ReceiptHandle": handle})
        if failed is not None:
            raise BrokerError(f"{self!r}: SQS did not delete the message ({failed.get('Code')}): "
                              f"{failed.get('Message')}")

    async def _visibility(self, url: str, handle: str, seconds: int) -> None:
        failed = await self._submit("change_message_visibility_batch", url,
                                   {"ReceiptHandle": handle, "VisibilityTimeout": seconds})
        if failed is not None:
            raise BrokerError(f"{self!r}: SQS did not change the message's visibility ({failed.get('Code')}): "
                              f"{failed.get('Message')}")

    async def _settle(self, delivery: Delivery, steps: Callable[[Lease], Awaitable[None]]) -> None:
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

        async def steps(lease: Lease) -> None:
            not_before, delay_s = timing(delay, fifo=self.fifo)
            entry, size = self._entry(bytes(delivery.body if body is None else body), delivery.key,
                                      delivery.headers,
                                      dedup=hash_id(delivery.key, "retry", message_id),
                                      not_before=not_before, delay=delay_s)
            await self._send(self._url, entry, size, publishing=False)
            await self._delete(self._url, lease.handle)

        await self._settle(delivery, steps)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        message_id = str(delivery.raw["MessageId"]) if isinstance(delivery.raw, Mapping) else delivery.delivery_id

        async def steps(lease: Lease) -> None:
            entry, size = self._entry(delivery.body, delivery.key, delivery.headers,
                                      dedup=hash_id(delivery.key, "dead", message_id),
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
        while len(held) < LIST_CAP:
            got = await self._receive(self._dead_url, MAX_BATCH, wait=0, visibility=max(30, self.options.wait_time))
            fresh = [m for m in got if m["MessageId"] not in seen]
            if not fresh:
                await self._give_back(got)
                break
            seen.update(m["MessageId"] for m in fresh)
            held.extend(fresh)

        def order(m: Mapping[str, Any]) -> tuple[float, int]:
            at = attr(m, A_DEAD_AT)
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
        body, key, headers = decode(msg, self)
        at = attr(msg, A_DEAD_AT)
        return DeadLetter(body, key, attr(msg, A_REASON) or REDRIVE_REASON, str(msg["MessageId"]),
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
                body, key, headers = decode(msg, self)
                entry, size = self._entry(body, key, headers,
                                          dedup=hash_id(key, "requeue", str(msg["MessageId"])))
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
