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
``basic.get`` on a throw-away channel (:mod:`~crawlherd.brokers._amqp_dead`), so they stay in place.

Delivery limit on every queue type: RabbitMQ counts deliveries only in quorum queues, so the broker
counts them itself: a message that arrives ``redelivered`` (its consumer died, lost its connection or
gave it back) is published again to the back of the queue with its count in the header
``x-crawlherd-deliveries`` and the original acked; at ``max_deliveries`` (10; 0 = no limit) it is
dead-lettered instead, with the reason (a quorum queue with ``delivery_limit`` is left to RabbitMQ's
own count). Leases: RabbitMQ has no client-side lease to extend (``lease`` is None; ``touch`` extends
nothing, and raises BrokerError once the delivery's channel is gone): an unacked delivery stays with its
consumer while the connection lives, up to the server's ``consumer_timeout`` (30 min by default; the
channel is then closed and the message redelivered) -- set ``consumer_timeout`` in ``rabbitmq.conf``
above the longest job.

Options (URL query or keywords): :class:`AMQPBrokerOptions`. ``connection=``: a live aio-pika connection to
use; the broker then closes only its own channels.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit, urlunsplit

import aio_pika
import aio_pika.exceptions as pika_exc
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractIncomingMessage

from crawlherd._aio import wait_while_progressing
from crawlherd._redact import redact_url
from crawlherd.brokers import _common
from crawlherd.brokers._amqp_dead import DeadLetterQueue
from crawlherd.brokers._amqp_wire import (
    CONNECTION_ERRORS,
    DEAD_AT,
    DEAD_ID,
    DELIVERIES,
    KEY_HEADER,
    REASON,
    AMQPBrokerOptions,
    ConfirmProgress,
    ConsumeState,
    declare_topology,
    delay_bucket_ms,
    header,
    str_headers,
)
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.errors import (
    BackendUnavailableError,
    BrokerError,
    ConfigurationError,
    CrawlherdError,
    MessageRejectedError,
    PublishError,
)

__all__ = ["AMQPBroker", "AMQPBrokerOptions", "delay_bucket_ms"]


class AMQPBroker(_common.BrokerBase):
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
        self._progress = ConfirmProgress()  # publishes in flight fail once it stood still publish_timeout
        self._delay_declared: dict[int, float] = {}
        self._broken = False
        self.declared_queues: set[str] = set()
        self._dead = DeadLetterQueue(self)

    @classmethod
    def from_url(cls, url: str, *, connection: AbstractConnection | None = None, **options: Any) -> AMQPBroker:
        opts = _common.build_options(AMQPBrokerOptions, url, options, backend="amqp")
        return cls(url, connection=connection, options=opts)

    # -- connection and topology --------------------------------------------------------------------

    @contextmanager
    def _driver_errors(self, doing: str, *, refused: type[BrokerError] = BrokerError) -> Iterator[None]:
        """aio-pika's errors as crawlherd's, the one place the RabbitMQ broker decides what is an outage: a
        lost connection or channel, or a timeout, is one (and the next operation reconnects); any other
        AMQP error is ``refused`` (what we were ``doing`` when RabbitMQ refused it). Errors the caller
        knows better (a publish returned, a queue declared with other arguments) are caught inside."""
        try:
            yield
        except (TimeoutError, *CONNECTION_ERRORS) as exc:
            self._broken = True  # the next operation reconnects
            raise _common.unavailable(f"{self!r}: RabbitMQ cannot be reached: {redact_url(repr(exc))}",
                              backend="amqp") from exc
        except pika_exc.AMQPError as exc:
            raise refused(f"{self!r}: {doing}: {exc!r}") from exc

    async def _open(self) -> None:
        await self._connect()

    async def _connect(self) -> None:
        if self._given is not None:
            if self._given.is_closed:
                raise _common.unavailable(f"{self!r}: the given connection is closed", backend="amqp")
            self._connection = self._given
        else:
            sep = "&" if "?" in self._url else "?"
            with self._driver_errors("connecting"):
                self._connection = await aio_pika.connect(
                    f"{self._url}{sep}heartbeat={self.options.heartbeat}", timeout=self.options.connect_timeout,
                    client_properties={"connection_name": f"crawlherd broker {self.queue}"})
        try:
            with self._driver_errors("declaring the queues"):
                self._pub = await self._publishing_channel(self._connection)
                await self._declare(self._pub)
        except CrawlherdError:
            await self._drop_connection()
            raise
        self._delay_declared.clear()
        self._broken = False

    async def _declare(self, ch: AbstractChannel) -> None:
        try:
            await declare_topology(ch, self.options, self.queue, self.dead_queue, self.dead_exchange)
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
                    async with asyncio.timeout(5):
                        await ch.close()
                except Exception as exc:  # noqa: BLE001 - it is going away anyway
                    _common.log.debug("%r: closing a channel: %r", self, exc)
        if conn is not None and conn is not self._given and not conn.is_closed:
            try:
                async with asyncio.timeout(5):
                    await conn.close()
            except Exception as exc:  # noqa: BLE001
                _common.log.debug("%r: closing the connection: %r", self, exc)

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
                raise _common.unavailable(error, backend="amqp")
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
            with self._driver_errors("opening a channel"):
                self._pub = await self._publishing_channel(self._connection)
        assert self._pub is not None
        return self._pub


    def _describe(self) -> str:
        return f"{redact_url(self._url)} queue={self.queue!r}"

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
        with self._driver_errors("publishing", refused=PublishError):
            try:
                target = ch.default_exchange if not exchange else await ch.get_exchange(exchange, ensure=False)
                # publish_timeout bounds a stall (no confirm at all for that long), not one publish's
                # latency: thousands in flight are confirmed long after they began, but they are confirmed.
                await wait_while_progressing(target.publish(message, routing_key, mandatory=True, timeout=None),
                                             self.options.publish_timeout, self._progress.last_moved)
                self._progress.confirmed()
            except pika_exc.PublishError as exc:
                raise MessageRejectedError(
                    f"{self!r}: RabbitMQ returned the message as unroutable (does queue {routing_key!r} exist?): {exc}"
                ) from exc
            except pika_exc.DeliveryError as exc:
                raise MessageRejectedError(f"{self!r}: RabbitMQ refused the message (nack): {exc}") from exc
            except TimeoutError as exc:  # a stall, not an outage (see above)
                raise PublishError(
                    f"{self!r}: RabbitMQ confirmed nothing for {self.options.publish_timeout} s; the message may or "
                    "may not have been kept -- publish it again"
                ) from exc

    async def _publishing_channel(self, connection: AbstractConnection) -> AbstractChannel:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        underlay = await channel.get_underlay_channel()
        self._progress.sent = lambda: int(getattr(underlay, "delivery_tag", 0))  # +1 per message written
        return channel

    async def _delay_queue(self, delay: float) -> str:
        ms = delay_bucket_ms(delay)
        name = f"{self.queue}.delay.{ms}"
        now = time.monotonic()
        if now - self._delay_declared.get(ms, -math.inf) > 30:
            ch = await self._channel()
            expires = ms + int(self.options.delay_queue_expires * 1000)
            with self._driver_errors(f"declaring delay queue {name!r}"):
                try:
                    await ch.declare_queue(name, durable=True, arguments={
                        "x-queue-type": "classic", "x-message-ttl": ms, "x-expires": expires,
                        "x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.queue})
                except pika_exc.ChannelPreconditionFailed as exc:
                    raise BrokerError(f"{self!r}: delay queue {name!r} exists with other arguments: {exc}") from exc
            self._delay_declared[ms] = now
            self.declared_queues.add(name)
        return name

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = _common.check_publish(body, key, headers, delay)
        routing_key = await self._delay_queue(delay) if delay > 0 else self.queue
        await self._send("", routing_key, bytes(body), key, hdrs)

    # -- consuming ----------------------------------------------------------------------------------

    async def _start_consume(self, session: _common.Session) -> ConsumeState:
        await self._channel()
        assert self._connection is not None
        with self._driver_errors(f"cannot consume from {self.queue!r}"):
            if self._sub is None or self._sub.is_closed:
                self._sub = await self._connection.channel(publisher_confirms=False)
                self._sub_gen += 1
            ch = self._sub
            state = ConsumeState(ch, self._sub_gen)
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
        return state

    async def _stop_consume(self, state: ConsumeState) -> None:
        state.stopped = True
        if state.on_close is not None:
            state.channel.close_callbacks.discard(state.on_close)
        if state.underlay is not None:
            state.underlay.on_consumer_cancel_callbacks.discard(state.on_cancel)
        if state.queue is not None and state.tag is not None and not state.channel.is_closed:
            try:
                async with asyncio.timeout(5):
                    await state.queue.cancel(state.tag)
            except Exception as exc:  # noqa: BLE001 - the channel close returns them anyway
                _common.log.debug("%r: basic.cancel: %r", self, exc)
        leftovers = []
        while not state.inbox.empty():
            leftovers.append(self._delivery(state, state.inbox.get_nowait()))
        if leftovers:
            await self._release(leftovers)

    def _delivery(self, state: ConsumeState, m: AbstractIncomingMessage) -> Delivery:
        key = m.message_id or header(m.headers, KEY_HEADER) or ""
        counted = header(m.headers, DELIVERIES)  # a copy published again by _count_redelivery
        return Delivery(m.body, key, f"{state.gen}.{m.delivery_tag}", bool(m.redelivered) or bool(counted),
                        str_headers(m.headers), raw=m)

    async def _fetch(self, state: ConsumeState, n: int) -> Sequence[Delivery]:
        if state.inbox.empty():
            if state.cancelled:
                raise BrokerError(f"{self!r}: RabbitMQ cancelled the consumer (was queue {self.queue!r} deleted?)")
            if state.lost.is_set():
                raise _common.unavailable(f"{self!r}: the consuming channel closed (connection lost?)", backend="amqp")
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
        counted = [header(m.headers, DELIVERIES), header(m.headers, "x-delivery-count")]
        earlier = 1 + max((int(c) for c in counted if c is not None and c.isdigit()), default=0)
        key = m.message_id or header(m.headers, KEY_HEADER) or ""
        headers = {**str_headers(m.headers), DELIVERIES: str(earlier)}
        try:
            if earlier >= limit:
                reason = f"delivered {earlier} times without being settled"
                _common.log.warning("%r: dead-lettering %r: %s", self, key, reason)
                dead = {**headers, REASON: reason, DEAD_AT: f"{time.time():.3f}", DEAD_ID: _common.new_id()}
                await self._send(self.dead_exchange, self.queue, m.body, key, dead)
            else:
                await self._send("", self.queue, m.body, key, headers)
            await m.ack()
        except BaseException:
            try:
                await m.nack(requeue=True)
            except Exception as exc:  # noqa: BLE001 - the channel closing returns it anyway
                _common.log.debug("%r: could not nack %r: %r", self, key, exc)
            raise
        return False

    # -- settling -----------------------------------------------------------------------------------

    async def _touch(self, delivery: Delivery) -> None:  # nothing to extend: ours while its channel lives
        gen = delivery.delivery_id.partition(".")[0]
        if self._sub is None or self._sub.is_closed or gen != str(self._sub_gen) or not self._alive():
            raise BrokerError(f"{self!r}: delivery {delivery.delivery_id} (key {delivery.key!r}): its channel is "
                              "gone; RabbitMQ delivers it again")

    @staticmethod
    def _message(delivery: Delivery) -> AbstractIncomingMessage:
        return cast("AbstractIncomingMessage", delivery.raw)

    @contextmanager
    def _settling(self, delivery: Delivery) -> Iterator[None]:
        """A settle on a channel that is gone is not an outage to wait out: the delivery is lost (RabbitMQ
        delivers it again), which BrokerError says."""
        try:
            yield
        except (*CONNECTION_ERRORS, pika_exc.AMQPError) as exc:
            raise BrokerError(f"{self!r}: cannot settle delivery {delivery.delivery_id} (key {delivery.key!r}): its "
                              f"channel is gone ({exc!r}); RabbitMQ delivers it again") from exc

    async def ack(self, delivery: Delivery) -> None:
        self._take(delivery)
        with self._settling(delivery):
            await self._message(delivery).ack()

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        self._take(delivery)
        with self._settling(delivery):
            await self._message(delivery).nack(requeue=True)

    async def _forward(self, delivery: Delivery, exchange: str, routing_key: str, body: bytes,
                       headers: Mapping[str, Any]) -> None:
        """Publish a copy (confirmed), then ack the original."""
        self._take(delivery)
        try:
            await self._send(exchange, routing_key, body, delivery.key, headers)
        except BaseException:
            self._untake(delivery)
            raise
        with self._settling(delivery):
            await self._message(delivery).ack()

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        _common.check_delay(delay)
        if body is not None:
            _common.check_publish(body, delivery.key, None, delay)
        self._check_held(delivery)
        routing_key = await self._delay_queue(delay) if delay > 0 else self.queue
        await self._forward(delivery, "", routing_key, delivery.body if body is None else bytes(body),
                            dict(delivery.headers))

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._check_held(delivery)
        headers = {**delivery.headers, REASON: reason, DEAD_AT: f"{time.time():.3f}", DEAD_ID: _common.new_id()}
        await self._forward(delivery, self.dead_exchange, self.queue, delivery.body, headers)

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        for d in deliveries:
            try:
                await self._message(d).nack(requeue=True)
            except Exception as exc:  # noqa: BLE001 - the channel closing returns it anyway
                _common.log.debug("%r: could not nack %s: %r", self, d.delivery_id, exc)

    # -- dead letters and stats -----------------------------------------------------------------------

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        return await self._dead.list(limit)

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        return await self._dead.requeue(dead_id)

    async def pending(self) -> int:
        ch = await self._channel()
        with self._driver_errors(f"queue {self.queue!r}"):
            queue = await ch.declare_queue(self.queue, passive=True)
        return int(queue.declaration_result.message_count or 0)


if TYPE_CHECKING:
    _conforms: type[Broker] = AMQPBroker
