"""``amqp://user:password@host:5672/vhost?queue=crawlherd.jobs``: a broker on RabbitMQ (aio-pika).

Topology, declared (idempotently) on open and after every reconnect:

- ``<queue>``: durable (``queue_type=classic``, the default) or quorum (``?queue_type=quorum``; then
  ``delivery_limit`` sets ``x-delivery-limit``), with ``x-dead-letter-exchange = <queue>.dlx``;
- ``<queue>.dlx`` (direct exchange) bound to ``<queue>.dead`` (the dead-letter queue, same type);
- ``<queue>.delay.<ms>``: one classic durable queue per retry delay (rounded up to two significant
  digits), with ``x-message-ttl = ms`` and dead-lettering back into ``<queue>`` through the default
  exchange; it expires (``x-expires``) ``delay_queue_expires`` seconds after its last use.

Guarantees: messages are persistent and published on a channel with **publisher confirms** and
``mandatory`` routing: ``publish`` returns after RabbitMQ confirmed the message, raises
:class:`~crawlherd.errors.MessageRejectedError` (a :class:`~crawlherd.errors.PublishError`) when it was
nacked or returned as unroutable (the queue is gone), :class:`~crawlherd.errors.PublishError` when
publishing stood still (no message sent, no confirm received, for any publish of the broker) for
``publish_timeout`` seconds -- a stall, not a busy broker: thousands of publishes in flight are
confirmed long after they began, and timing them out would publish again what RabbitMQ kept --, and
:class:`~crawlherd.errors.BackendUnavailableError` when RabbitMQ cannot be reached (the next call
reconnects). A timeout or a lost connection does not say whether RabbitMQ kept the message: publish
it again (at least once; the key lets consumers drop the duplicate).

Consumers get at most ``prefetch`` unacknowledged messages (``basic.qos``); a delivery that is never
settled comes back when its channel closes (consumer closed, crashed or lost its connection), flagged
``redelivered``. ``retry`` and ``dead_letter`` publish the copy with a confirm **before** acking the
original: a crash in between duplicates, never loses. ``nack(requeue=False)`` is a dead letter with
reason ``nacked``; messages RabbitMQ dead-letters itself (e.g. quorum ``delivery_limit``) land in the
same dead-letter queue, with the reason taken from ``x-death``. ``dead_letters()`` peeks with
``basic.get`` on a throw-away channel and closes it, so the listed messages stay where they are.

Delivery limit on every queue type: RabbitMQ counts deliveries only in quorum queues, so the broker
counts them itself: a message that arrives ``redelivered`` (its consumer died, lost its connection or
gave it back) is published again to the back of the queue with its count in the header
``x-crawlherd-deliveries`` and the original acked; at ``max_deliveries`` (10; 0 = no limit) it is
dead-lettered instead, with the reason (a quorum queue with ``delivery_limit`` is left to RabbitMQ's
own count). Leases: RabbitMQ has no client-side lease to extend (``lease``
is None, ``touch`` does nothing): an unacked delivery stays with its consumer while the connection
lives, up to the server's ``consumer_timeout`` (30 min by default; the channel is then closed and the
message redelivered) -- set ``consumer_timeout`` in ``rabbitmq.conf`` above the longest job.

Options (URL query or keywords): :class:`AMQPBrokerOptions`. ``connection=``: a live aio-pika connection to
use; the broker then closes only its own channels.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import aio_pika.exceptions as pika_exc
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage, AbstractQueue
from annotated_types import MaxLen, MinLen

from crawlherd._aio import wait_while_progressing
from crawlherd._options import AtLeast0, Seconds
from crawlherd._redact import redact_url
from crawlherd.brokers._common import (
    RESERVED_HEADER_PREFIX,
    BrokerBase,
    BrokerOptions,
    Session,
    build_options,
    check_delay,
    check_publish,
    log,
    new_id,
)
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import (
    BackendUnavailableError,
    BrokerError,
    ConfigurationError,
    MessageRejectedError,
    PublishError,
)

__all__ = ["AMQPBroker", "AMQPBrokerOptions"]

_CONNECTION_ERRORS = (pika_exc.AMQPConnectionError, pika_exc.ChannelInvalidStateError, pika_exc.ConnectionClosed,
                      ConnectionError, OSError, RuntimeError)
_KEY_HEADER = RESERVED_HEADER_PREFIX + "key"
_REASON = RESERVED_HEADER_PREFIX + "reason"
_DEAD_AT = RESERVED_HEADER_PREFIX + "dead-at"
_DEAD_ID = RESERVED_HEADER_PREFIX + "dead-id"
_DELIVERIES = RESERVED_HEADER_PREFIX + "deliveries"


@dataclass(frozen=True)
class AMQPBrokerOptions(BrokerOptions):
    """The ``queue`` (its dead-letter and delay queues are named after it) and its ``queue_type``
    (``quorum``: ``delivery_limit`` sets RabbitMQ's own ``x-delivery-limit``; crawlherd counts
    ``max_deliveries`` itself on every type); ``publish_timeout`` for a publisher confirm;
    ``connect_timeout``; the AMQP ``heartbeat`` (seconds, 0: off); ``delay_queue_expires`` seconds an
    unused retry-delay queue is kept."""

    backend = "amqp"

    queue: Annotated[str, MinLen(1), MaxLen(200)] = "crawlherd.jobs"
    queue_type: Literal["classic", "quorum"] = "classic"
    delivery_limit: AtLeast0 = 0
    publish_timeout: Seconds = 10.0
    connect_timeout: Seconds = 10.0
    heartbeat: AtLeast0 = 60
    delay_queue_expires: Seconds = 600.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.delivery_limit < 0 or (self.delivery_limit and self.queue_type != "quorum"):
            raise ConfigurationError("amqp broker option delivery_limit: a number >= 1, with queue_type=quorum only")


def delay_bucket_ms(delay: float) -> int:
    """``delay`` in ms, rounded **up** to two significant digits (few delay queues, never early)."""
    ms = max(1, math.ceil(delay * 1000))
    if ms < 100:
        return ms
    step = 10 ** (len(str(ms)) - 2)
    return int(math.ceil(ms / step) * step)


def _str_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The publisher's own headers (ours and RabbitMQ's dead-lettering ones left out)."""
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        lowered = name.lower()
        if lowered.startswith(RESERVED_HEADER_PREFIX) or lowered == "x-death" or lowered.startswith(
                ("x-first-death-", "x-last-death-", "x-delivery-count")):
            continue
        out[name] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def _header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    value = (headers or {}).get(name)
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class _ConsumeState:
    __slots__ = ("cancelled", "channel", "gen", "inbox", "lost", "on_cancel", "on_close", "queue", "stopped", "tag",
                 "underlay")

    def __init__(self, channel: AbstractChannel, gen: int) -> None:
        self.channel = channel
        self.gen = gen
        self.inbox: asyncio.Queue[AbstractIncomingMessage] = asyncio.Queue()
        self.lost = asyncio.Event()
        self.queue: AbstractQueue | None = None
        self.tag: str | None = None
        self.stopped = False
        self.on_close: Any = None
        self.on_cancel: Any = None
        self.underlay: Any = None
        self.cancelled = False


class AMQPBroker(BrokerBase):
    """A broker on RabbitMQ; see the module docstring."""

    backend = "amqp"

    def __init__(self, url: str = "amqp://guest:guest@127.0.0.1:5672/", *,
                 connection: AbstractConnection | None = None, options: AMQPBrokerOptions | None = None) -> None:
        super().__init__()
        self.options = opts = options or AMQPBrokerOptions()
        parts = urlsplit(url)
        self._url = urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        self.queue = opts.queue
        self.dead_queue = f"{opts.queue}.dead"
        self.dead_exchange = f"{opts.queue}.dlx"
        self._given = connection
        self._connection: AbstractConnection | None = None
        self._pub: AbstractChannel | None = None
        self._sub: AbstractChannel | None = None
        self._sub_gen = 0
        self._pub_lock = asyncio.Lock()
        # When the last reconnect failed, and why: the publishes that waited for it fail with it
        # instead of each trying again (hundreds of connection attempts per relay round).
        self._reconnect_failed: tuple[float, str] = (-math.inf, "")
        # Publishing progress: confirms received, messages sent (the publishing channel's delivery
        # tag), and when either last moved. Publishes in flight fail once it stood still publish_timeout.
        self._confirms = 0
        self._pub_sent: Callable[[], int] = lambda: 0
        self._progress_mark = (0, 0)
        self._progress_at = -math.inf
        self._delay_declared: dict[int, float] = {}
        self._broken = False
        self.declared_queues: set[str] = set()

    @classmethod
    def from_url(cls, url: str, *, connection: AbstractConnection | None = None, **options: Any) -> AMQPBroker:
        return cls(url, connection=connection, options=build_options(AMQPBrokerOptions, url, options, backend="amqp"))

    def _describe(self) -> str:
        return f"{redact_url(self._url)} queue={self.queue!r}"

    # -- connection and topology --------------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> BackendUnavailableError:
        self._broken = True  # the next operation reconnects
        return BackendUnavailableError(f"{self!r}: RabbitMQ cannot be reached: {redact_url(repr(exc))}",
                                       backend="amqp")

    async def _open(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        if self._given is not None:
            if self._given.is_closed:
                raise BackendUnavailableError(f"{self!r}: the given connection is closed", backend="amqp")
            self._connection = self._given
        else:
            sep = "&" if "?" in self._url else "?"
            try:
                self._connection = await aio_pika.connect(
                    f"{self._url}{sep}heartbeat={self.options.heartbeat}", timeout=self.options.connect_timeout,
                    client_properties={"connection_name": f"crawlherd broker {self.queue}"})
            except (TimeoutError, *_CONNECTION_ERRORS) as exc:
                raise self._unavailable(exc) from exc
        try:
            self._pub = await self._publishing_channel(self._connection)
            await self._declare(self._pub)
        except ConfigurationError:
            await self._drop_connection()
            raise
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            await self._drop_connection()
            raise self._unavailable(exc) from exc
        self._delay_declared.clear()
        self._broken = False

    async def _declare(self, ch: AbstractChannel) -> None:
        opts = self.options
        qtype: dict[str, Any] = {"x-queue-type": opts.queue_type}
        main_args: dict[str, Any] = {**qtype, "x-dead-letter-exchange": self.dead_exchange,
                                     "x-dead-letter-routing-key": self.queue}
        if opts.delivery_limit:
            main_args["x-delivery-limit"] = opts.delivery_limit
        try:
            dlx = await ch.declare_exchange(self.dead_exchange, aio_pika.ExchangeType.DIRECT, durable=True)
            dead = await ch.declare_queue(self.dead_queue, durable=True, arguments=qtype)
            await dead.bind(dlx, routing_key=self.queue)
            await ch.declare_queue(self.queue, durable=True, arguments=main_args)
        except pika_exc.ChannelPreconditionFailed as exc:
            raise ConfigurationError(
                f"{self!r}: queue {self.queue!r} (or {self.dead_queue!r}) already exists with other arguments "
                f"({exc}); use the same queue_type/delivery_limit, or another queue name"
            ) from exc
        self.declared_queues.update((self.queue, self.dead_queue))

    async def _drop_connection(self) -> None:
        conn, self._connection = self._connection, None
        pub, sub, self._pub, self._sub = self._pub, self._sub, None, None
        for ch in (sub, pub):
            if ch is not None and not ch.is_closed:
                try:
                    await asyncio.wait_for(ch.close(), 5)
                except Exception as exc:  # noqa: BLE001 - it is going away anyway
                    log.debug("%r: closing a channel: %r", self, exc)
        if conn is not None and conn is not self._given and not conn.is_closed:
            try:
                await asyncio.wait_for(conn.close(), 5)
            except Exception as exc:  # noqa: BLE001
                log.debug("%r: closing the connection: %r", self, exc)

    async def _channel(self) -> AbstractChannel:
        """The publishing channel, connecting first when the broker was never opened (RabbitMQ was down
        at start) or reconnecting when the connection (or channel) was lost."""
        if self._closed:
            raise BrokerError(f"{self!r} is closed")
        if self._opened and self._alive() and self._pub is not None and not self._pub.is_closed:
            return self._pub
        asked = time.monotonic()
        async with self._pub_lock:  # one reconnect at a time
            failed_at, error = self._reconnect_failed
            if failed_at >= asked:  # the attempt made while we waited failed: the same outage, no new attempt
                raise BackendUnavailableError(error, backend="amqp")
            try:
                if not self._opened:
                    await self._ensure_open()
                    assert self._pub is not None
                    return self._pub
                return await self._reopen()
            except BackendUnavailableError as exc:
                self._reconnect_failed = (time.monotonic(), str(exc))
                raise

    async def _reopen(self) -> AbstractChannel:
        if self._closed:
            raise BrokerError(f"{self!r} is closed")
        if not self._alive():
            await self._drop_connection()
            await self._connect()
        elif self._pub is None or self._pub.is_closed:
            assert self._connection is not None
            try:
                self._pub = await self._publishing_channel(self._connection)
            except (TimeoutError, *_CONNECTION_ERRORS) as exc:
                raise self._unavailable(exc) from exc
        assert self._pub is not None
        return self._pub

    def _alive(self) -> bool:
        conn = self._connection
        if conn is None or conn.is_closed or self._broken:
            return False
        underlay = getattr(conn, "transport", None)  # aio-pika marks itself closed a little later than aiormq
        return underlay is None or not underlay.connection.is_closed

    async def _shutdown(self) -> None:
        await self._drop_connection()

    # -- publishing ---------------------------------------------------------------------------------

    async def _send(self, exchange: str, routing_key: str, body: bytes, key: str, headers: Mapping[str, Any]) -> None:
        ch = await self._channel()
        message = aio_pika.Message(bytes(body), headers=dict(headers), message_id=key,
                                   delivery_mode=aio_pika.DeliveryMode.PERSISTENT, timestamp=time.time())
        try:
            target = ch.default_exchange if not exchange else await ch.get_exchange(exchange, ensure=False)
            # publish_timeout bounds a stall (no confirm at all for that long), not one publish's
            # latency: thousands in flight are confirmed long after they began, but they are confirmed.
            await wait_while_progressing(target.publish(message, routing_key, mandatory=True, timeout=None),
                                         self.options.publish_timeout, self._publish_progress)
            self._confirms += 1
        except pika_exc.PublishError as exc:
            raise MessageRejectedError(
                f"{self!r}: RabbitMQ returned the message as unroutable (does queue {routing_key!r} exist?): {exc}"
            ) from exc
        except pika_exc.DeliveryError as exc:
            raise MessageRejectedError(f"{self!r}: RabbitMQ refused the message (nack): {exc}") from exc
        except TimeoutError as exc:
            raise PublishError(
                f"{self!r}: RabbitMQ confirmed nothing for {self.options.publish_timeout} s; the message may or may "
                "not have been kept -- publish it again"
            ) from exc
        except _CONNECTION_ERRORS as exc:
            raise self._unavailable(exc) from exc
        except pika_exc.AMQPError as exc:
            raise PublishError(f"{self!r}: {exc!r}") from exc

    async def _publishing_channel(self, connection: AbstractConnection) -> AbstractChannel:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        underlay = await channel.get_underlay_channel()
        self._pub_sent = lambda: int(getattr(underlay, "delivery_tag", 0))  # +1 per message written
        return channel

    def _publish_progress(self) -> float:
        """When publishing last moved (a message sent, or a confirm received), as far as seen: the
        publishes queued behind thousands of others in the client are not the broker's stall."""
        mark = (self._confirms, self._pub_sent())
        if mark != self._progress_mark:
            self._progress_mark = mark
            self._progress_at = time.monotonic()
        return self._progress_at

    async def _delay_queue(self, delay: float) -> str:
        ms = delay_bucket_ms(delay)
        name = f"{self.queue}.delay.{ms}"
        now = time.monotonic()
        if now - self._delay_declared.get(ms, -math.inf) > 30:
            ch = await self._channel()
            expires = ms + int(self.options.delay_queue_expires * 1000)
            try:
                await ch.declare_queue(name, durable=True, arguments={
                    "x-queue-type": "classic", "x-message-ttl": ms, "x-expires": expires,
                    "x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.queue})
            except pika_exc.ChannelPreconditionFailed as exc:
                raise BrokerError(f"{self!r}: delay queue {name!r} exists with other arguments: {exc}") from exc
            except (TimeoutError, *_CONNECTION_ERRORS) as exc:
                raise self._unavailable(exc) from exc
            self._delay_declared[ms] = now
            self.declared_queues.add(name)
        return name

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = check_publish(body, key, headers, delay)
        routing_key = await self._delay_queue(delay) if delay > 0 else self.queue
        await self._send("", routing_key, bytes(body), key, hdrs)

    # -- consuming ----------------------------------------------------------------------------------

    async def _start_consume(self, session: Session) -> _ConsumeState:
        await self._channel()
        assert self._connection is not None
        try:
            if self._sub is None or self._sub.is_closed:
                self._sub = await self._connection.channel(publisher_confirms=False)
                self._sub_gen += 1
            ch = self._sub
            state = _ConsumeState(ch, self._sub_gen)
            state.on_close = lambda *_: state.lost.set()
            ch.close_callbacks.add(state.on_close)

            def on_cancel(frame: Any) -> None:  # RabbitMQ cancelled our consumer (queue deleted, ...)
                if frame.consumer_tag == state.tag:
                    state.cancelled = True
                    state.lost.set()

            state.underlay = await ch.get_underlay_channel()
            state.on_cancel = on_cancel
            state.underlay.on_consumer_cancel_callbacks.add(on_cancel)
            await ch.set_qos(prefetch_count=session.prefetch)
            queue = await ch.get_queue(self.queue, ensure=False)

            async def on_message(message: AbstractIncomingMessage) -> None:
                if state.stopped:
                    await message.nack(requeue=True)
                else:
                    state.inbox.put_nowait(message)

            state.queue = queue
            state.tag = await queue.consume(on_message, no_ack=False)
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            raise self._unavailable(exc) from exc
        except pika_exc.AMQPError as exc:
            raise BrokerError(f"{self!r}: cannot consume from {self.queue!r}: {exc!r}") from exc
        return state

    async def _stop_consume(self, state: _ConsumeState) -> None:
        state.stopped = True
        if state.on_close is not None:
            state.channel.close_callbacks.discard(state.on_close)
        if state.underlay is not None:
            state.underlay.on_consumer_cancel_callbacks.discard(state.on_cancel)
        if state.queue is not None and state.tag is not None and not state.channel.is_closed:
            try:
                await asyncio.wait_for(state.queue.cancel(state.tag), 5)
            except Exception as exc:  # noqa: BLE001 - the channel close returns them anyway
                log.debug("%r: basic.cancel: %r", self, exc)
        leftovers = []
        while not state.inbox.empty():
            leftovers.append(self._delivery(state, state.inbox.get_nowait()))
        if leftovers:
            await self._release(leftovers)

    def _delivery(self, state: _ConsumeState, m: AbstractIncomingMessage) -> Delivery:
        key = m.message_id or _header(m.headers, _KEY_HEADER) or ""
        counted = _header(m.headers, _DELIVERIES)  # a copy published again by _count_redelivery
        return Delivery(m.body, key, f"{state.gen}.{m.delivery_tag}", bool(m.redelivered) or bool(counted),
                        _str_headers(m.headers), raw=m)

    async def _fetch(self, state: _ConsumeState, n: int) -> Sequence[Delivery]:
        if state.inbox.empty():
            if state.cancelled:
                raise BrokerError(f"{self!r}: RabbitMQ cancelled the consumer (was queue {self.queue!r} deleted?)")
            if state.lost.is_set():
                raise BackendUnavailableError(f"{self!r}: the consuming channel closed (connection lost?)",
                                              backend="amqp")
            getter = asyncio.ensure_future(state.inbox.get())
            lost = asyncio.ensure_future(state.lost.wait())
            try:
                await asyncio.wait({getter, lost}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lost.cancel()
                if not getter.done():
                    getter.cancel()
            if not getter.done() or getter.cancelled():
                return []  # lost: the next call raises
            first = getter.result()
        else:
            first = state.inbox.get_nowait()
        messages = [first]
        while len(messages) < n and not state.inbox.empty():
            messages.append(state.inbox.get_nowait())
        if self.options.max_deliveries and not self.options.delivery_limit:  # else RabbitMQ counts them
            messages = [m for m in messages if not m.redelivered or await self._count_redelivery(m)]
        return [self._delivery(state, m) for m in messages]

    async def _count_redelivery(self, m: AbstractIncomingMessage) -> bool:
        """``max_deliveries`` on any queue type (classic queues keep no count): a redelivered message is
        published again with its count of unsettled deliveries (header ``x-crawlherd-deliveries``, or
        the quorum queue's ``x-delivery-count`` when higher) plus one and the original acked -- or,
        at the limit, dead-lettered. The copy comes back through the queue; False: not handed out now."""
        limit = self.options.max_deliveries
        counted = [_header(m.headers, _DELIVERIES), _header(m.headers, "x-delivery-count")]
        earlier = 1 + max((int(c) for c in counted if c is not None and c.isdigit()), default=0)
        key = m.message_id or _header(m.headers, _KEY_HEADER) or ""
        headers = {**_str_headers(m.headers), _DELIVERIES: str(earlier)}
        try:
            if earlier >= limit:
                reason = f"delivered {earlier} times without being settled"
                log.warning("%r: dead-lettering %r: %s", self, key, reason)
                dead = {**headers, _REASON: reason, _DEAD_AT: f"{time.time():.3f}", _DEAD_ID: new_id()}
                await self._send(self.dead_exchange, self.queue, m.body, key, dead)
            else:
                await self._send("", self.queue, m.body, key, headers)
            await m.ack()
        except BaseException:
            try:
                await m.nack(requeue=True)
            except Exception as exc:  # noqa: BLE001 - the channel closing returns it anyway
                log.debug("%r: could not nack %r: %r", self, key, exc)
            raise
        return False

    # -- settling -----------------------------------------------------------------------------------

    @staticmethod
    def _message(delivery: Delivery) -> AbstractIncomingMessage:
        message: AbstractIncomingMessage = delivery.raw
        return message

    def _settle_failed(self, delivery: Delivery, exc: BaseException) -> BrokerError:
        return BrokerError(
            f"{self!r}: cannot settle delivery {delivery.delivery_id} (key {delivery.key!r}): its channel is gone "
            f"({exc!r}); RabbitMQ delivers it again"
        )

    async def ack(self, delivery: Delivery) -> None:
        self._take(delivery)
        try:
            await self._message(delivery).ack()
        except (*_CONNECTION_ERRORS, pika_exc.AMQPError) as exc:
            raise self._settle_failed(delivery, exc) from exc

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        self._take(delivery)
        try:
            await self._message(delivery).nack(requeue=True)
        except (*_CONNECTION_ERRORS, pika_exc.AMQPError) as exc:
            raise self._settle_failed(delivery, exc) from exc

    async def _forward(self, delivery: Delivery, exchange: str, routing_key: str, body: bytes,
                       headers: Mapping[str, Any]) -> None:
        """Publish a copy (confirmed), then ack the original."""
        self._take(delivery)
        try:
            await self._send(exchange, routing_key, body, delivery.key, headers)
        except BaseException:
            self._untake(delivery)
            raise
        try:
            await self._message(delivery).ack()
        except (*_CONNECTION_ERRORS, pika_exc.AMQPError) as exc:
            raise self._settle_failed(delivery, exc) from exc

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        check_delay(delay)
        if body is not None:
            check_publish(body, delivery.key, None, delay)
        self._check_held(delivery)
        routing_key = await self._delay_queue(delay) if delay > 0 else self.queue
        await self._forward(delivery, "", routing_key, delivery.body if body is None else bytes(body),
                            dict(delivery.headers))

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._check_held(delivery)
        headers = {**delivery.headers, _REASON: reason, _DEAD_AT: f"{time.time():.3f}", _DEAD_ID: new_id()}
        await self._forward(delivery, self.dead_exchange, self.queue, delivery.body, headers)

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            try:
                await self._message(d).nack(requeue=True)
            except Exception as exc:  # noqa: BLE001 - the channel closing returns it anyway
                log.debug("%r: could not nack %s: %r", self, d.delivery_id, exc)

    # -- dead letters and stats -----------------------------------------------------------------------

    def _dead_letter(self, m: AbstractIncomingMessage) -> DeadLetter:
        headers = m.headers or {}
        reason = _header(headers, _REASON)
        dead_at_s = _header(headers, _DEAD_AT)
        dead_at = float(dead_at_s) if dead_at_s else None
        dead_id = _header(headers, _DEAD_ID)
        if reason is None:  # dead-lettered by RabbitMQ itself
            deaths = headers.get("x-death")
            first = deaths[0] if isinstance(deaths, list) and deaths else {}
            reason = f"rabbitmq: {_header(first, 'reason') or 'unknown'}" if isinstance(first, Mapping) else "rabbitmq"
        if dead_id is None:
            digest = hashlib.sha256(m.body + repr(sorted(_str_headers(headers).items())).encode())
            dead_id = f"x{digest.hexdigest()[:24]}"
        key = m.message_id or _header(headers, _KEY_HEADER) or ""
        return DeadLetter(m.body, key, reason, dead_id, dead_at, _str_headers(headers))

    async def _scratch_channel(self, confirms: bool) -> tuple[AbstractChannel, AbstractQueue, int]:
        await self._channel()
        assert self._connection is not None
        try:
            ch = await self._connection.channel(publisher_confirms=confirms, on_return_raises=confirms)
            queue = await ch.declare_queue(self.dead_queue, passive=True)
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            raise self._unavailable(exc) from exc
        except pika_exc.AMQPError as exc:
            raise BrokerError(f"{self!r}: dead-letter queue {self.dead_queue!r}: {exc!r}") from exc
        count = queue.declaration_result.message_count or 0
        return ch, queue, int(count)

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        ch, queue, count = await self._scratch_channel(confirms=False)
        out: list[DeadLetter] = []
        try:
            while len(out) < limit:
                m = await queue.get(no_ack=False, fail=False, timeout=self.options.publish_timeout)
                if m is None:
                    break
                out.append(self._dead_letter(m))
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            raise self._unavailable(exc) from exc
        finally:
            await self._close_quietly(ch)  # every message got goes back, in place
        if out:
            await self._wait_dead_count(count)
        return out

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        ch, queue, count = await self._scratch_channel(confirms=True)
        moved = 0
        try:
            for _ in range(max(count, 1) * 2 + 100):  # a bound, in case dead letters keep arriving
                m = await queue.get(no_ack=False, fail=False, timeout=self.options.publish_timeout)
                if m is None:
                    break
                dead = self._dead_letter(m)
                if dead_id is not None and dead.dead_id != dead_id:
                    continue  # left unacked: back in place when the channel closes
                msg = aio_pika.Message(m.body, headers=dict(dead.headers), message_id=dead.key,
                                       delivery_mode=aio_pika.DeliveryMode.PERSISTENT, timestamp=time.time())
                await ch.default_exchange.publish(msg, self.queue, mandatory=True,
                                                  timeout=self.options.publish_timeout)
                await m.ack()
                moved += 1
                if dead_id is not None:
                    break
        except pika_exc.PublishError as exc:
            raise PublishError(f"{self!r}: requeue returned as unroutable: {exc}") from exc
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            raise self._unavailable(exc) from exc
        finally:
            await self._close_quietly(ch)
        await self._wait_dead_count(count - moved)
        return moved

    async def _wait_dead_count(self, expected: int) -> None:
        """Wait (briefly) until the messages a closed scratch channel held are back in the dead-letter
        queue: RabbitMQ returns them asynchronously (quorum queues through Raft), and a caller that lists
        or requeues again right away must find them."""
        ch = await self._channel()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            try:
                queue = await ch.declare_queue(self.dead_queue, passive=True)
            except (TimeoutError, *_CONNECTION_ERRORS) as exc:
                raise self._unavailable(exc) from exc
            if (queue.declaration_result.message_count or 0) >= expected:
                return
            await asyncio.sleep(0.01)

    async def _close_quietly(self, ch: AbstractChannel) -> None:
        try:
            await asyncio.wait_for(ch.close(), 5)
        except Exception as exc:  # noqa: BLE001
            log.debug("%r: closing a scratch channel: %r", self, exc)

    async def pending(self) -> int:
        ch = await self._channel()
        try:
            queue = await ch.declare_queue(self.queue, passive=True)
        except (TimeoutError, *_CONNECTION_ERRORS) as exc:
            raise self._unavailable(exc) from exc
        except pika_exc.AMQPError as exc:
            raise BrokerError(f"{self!r}: queue {self.queue!r}: {exc!r}") from exc
        return int(queue.declaration_result.message_count or 0)


if TYPE_CHECKING:
    _conforms: type[Broker] = AMQPBroker
