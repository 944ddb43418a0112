"""The RabbitMQ broker's wire and topology: its options, the queues it declares, the headers it keeps its
bookkeeping in, the delay queues' rounding, a consumer's state and the publishing progress (see
:mod:`crawlherd.brokers.amqp`)."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import aio_pika
import aio_pika.exceptions as pika_exc
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from annotated_types import MaxLen, MinLen

from crawlherd._options import AtLeast0, Seconds
from crawlherd.brokers._common import RESERVED_HEADER_PREFIX, BrokerOptions
from crawlherd.errors import ConfigurationError

# a lost connection or channel: an outage (the next call reconnects)
CONNECTION_ERRORS = (pika_exc.AMQPConnectionError, pika_exc.ChannelInvalidStateError, pika_exc.ConnectionClosed,
                      ConnectionError, OSError, RuntimeError)
KEY_HEADER = RESERVED_HEADER_PREFIX + "key"
REASON = RESERVED_HEADER_PREFIX + "reason"
DEAD_AT = RESERVED_HEADER_PREFIX + "dead-at"
DEAD_ID = RESERVED_HEADER_PREFIX + "dead-id"
DELIVERIES = RESERVED_HEADER_PREFIX + "deliveries"


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


async def declare_topology(ch: AbstractChannel, opts: AMQPBrokerOptions, queue: str, dead_queue: str,
                           dead_exchange: str) -> None:
    """Declare (idempotently) ``queue`` dead-lettering into ``dead_exchange``, bound to ``dead_queue``.
    Raises aio-pika's ``ChannelPreconditionFailed`` when one exists with other arguments."""
    qtype: dict[str, Any] = {"x-queue-type": opts.queue_type}
    main_args: dict[str, Any] = {**qtype, "x-dead-letter-exchange": dead_exchange, "x-dead-letter-routing-key": queue}
    if opts.delivery_limit:
        main_args["x-delivery-limit"] = opts.delivery_limit
    dlx = await ch.declare_exchange(dead_exchange, aio_pika.ExchangeType.DIRECT, durable=True)
    dead = await ch.declare_queue(dead_queue, durable=True, arguments=qtype)
    await dead.bind(dlx, routing_key=queue)
    await ch.declare_queue(queue, durable=True, arguments=main_args)


def delay_bucket_ms(delay: float) -> int:
    """``delay`` in ms, rounded **up** to two significant digits (few delay queues, never early)."""
    ms = max(1, math.ceil(delay * 1000))
    if ms < 100:
        return ms
    step = 10 ** (len(str(ms)) - 2)
    return int(math.ceil(ms / step) * step)


def str_headers(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """The publisher's own headers (ours and RabbitMQ's dead-lettering ones left out)."""
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        lowered = name.lower()
        if lowered.startswith(RESERVED_HEADER_PREFIX) or lowered == "x-death" or lowered.startswith(
                ("x-first-death-", "x-last-death-", "x-delivery-count")):
            continue
        out[name] = value.decode() if isinstance(value, bytes) else str(value)
    return out


def header(headers: Mapping[str, Any] | None, name: str) -> str | None:
    value = (headers or {}).get(name)
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


class ConsumeState:
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


class ConfirmProgress:
    """When publishing last moved -- a message written to the channel (``sent``: the publishing
    channel's delivery tag, +1 per message) or a confirm received --, as far as seen: publishes in
    flight fail when it stood still ``publish_timeout``; those queued behind thousands of others in the
    client are not the broker's stall."""

    def __init__(self) -> None:
        self.sent: Callable[[], int] = lambda: 0
        self._confirms = 0
        self._mark = (0, 0)
        self._at = -math.inf

    def confirmed(self) -> None:
        self._confirms += 1

    def last_moved(self) -> float:
        mark = (self._confirms, self.sent())
        if mark != self._mark:
            self._mark = mark
            self._at = time.monotonic()
        return self._at
