"""The broker protocol: how job messages travel from the dispatch service to the workers.

One protocol for every broker (``sqlite://``, ``redis://`` Streams, ``amqp://`` RabbitMQ, and the
in-memory reference) and one contract suite (``tests/contract/test_broker_contract.py``).

Guarantees every broker keeps:

- ``publish`` returns only after the broker has **confirmed** it holds the message durably (SQLite
  commit, Redis reply to XADD, RabbitMQ publisher confirm); otherwise it raises
  :class:`~crawlherd.errors.PublishError` or :class:`~crawlherd.errors.BackendUnavailableError`.
  Delivery is **at least once**; ``key`` (the idempotency key ``target_id:slot_at``) travels with the
  message so that consumers drop duplicates.
- A delivery is settled by exactly one of ``ack``, ``nack``, ``retry`` or ``dead_letter``. A delivery
  that is never settled (the consumer died) is delivered again: after ``visibility_timeout`` (SQLite),
  by XAUTOCLAIM after ``claim_idle`` (Redis), when the channel closes (RabbitMQ).
- ``retry(delivery, delay=..., body=...)`` publishes the (possibly updated) body again, not to be
  delivered before ``delay`` seconds, then acks the original: never both lost and never both live.
- ``dead_letter`` moves the message to the broker's dead-letter store (table rows, a ``:dead`` stream,
  a dead-letter exchange) with the reason; ``dead_letters()`` lists them and ``requeue_dead()`` sends
  them back. ``nack(requeue=False)`` is ``dead_letter(reason="nacked")``.
- A delivery is settled through the broker object that delivered it, once: settling it again (or
  after its lease was lost, when the broker can tell) raises :class:`~crawlherd.errors.BrokerError`.
  Deliveries stay settle-able after their ``consume()`` loop ended, until the broker is closed;
  ``close()`` gives every unsettled delivery back to the queue at once (best effort: when the broker
  cannot be reached they come back after their lease, as for a consumer that died).
- Leases: ``lease`` says how many seconds an unsettled delivery stays this consumer's without
  ``touch`` (SQLite and memory: ``visibility_timeout``; Redis: ``claim_idle``), or None when nothing on
  the client's side runs out: RabbitMQ holds a delivery for its channel's life, the SQS broker extends
  the visibility of what it holds itself, a Celery task broker delivers nothing. ``touch(delivery)``
  extends the claim by another ``lease`` (a consumer that works on a delivery longer than that calls it
  every fraction of the lease: its heartbeat); where ``lease`` is None it only checks that the delivery
  is still held (SQS: and extends its visibility at once). Touching a delivery that this broker does not
  hold -- settled, delivered by another broker object, or its claim lost to another consumer -- raises
  :class:`~crawlherd.errors.BrokerError`; an unreachable broker raises
  :class:`~crawlherd.errors.BackendUnavailableError` and the claim stands until its lease runs out.
- A message delivered ``max_deliveries`` times (default 10, every broker) without being settled is
  dead-lettered with that reason instead of being delivered again: a message that kills its consumer
  cannot loop forever.
- Outages: every broker maps its driver's errors at one place (its ``_driver_errors``); a service that
  cannot be reached is :class:`~crawlherd.errors.BackendUnavailableError` with ``role="broker"`` and
  ``backend`` the broker's kind, so that a caller knows what failed from the error's type.
- ``consume()`` never holds more than ``prefetch`` unsettled deliveries of its own, stops (ends the
  iteration) when the broker is closed, and raises :class:`~crawlherd.errors.BackendUnavailableError`
  when the connection is lost; start it again to go on.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["Broker", "DeadLetter", "Delivery"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to a consumer.

    ``body``: the bytes that were published. ``key``: the idempotency key given at publish.
    ``delivery_id``: the broker's own handle (row id, stream entry id, delivery tag).
    ``redelivered``: True when the broker knows it delivered this message before.
    """

    body: bytes
    key: str
    delivery_id: str
    redelivered: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    raw: Any = field(default=None, repr=False, compare=False)  # the driver's own message object


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message in the dead-letter store."""

    body: bytes
    key: str
    reason: str
    dead_id: str
    dead_at: float | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class Broker(Protocol):
    """A message broker backend; an async context manager. ``close`` releases only what it opened."""

    async def __aenter__(self) -> Broker: ...

    async def __aexit__(self, *exc_info: object) -> None: ...

    async def publish(
        self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None, delay: float = 0.0
    ) -> None:
        """Publish ``body`` and return once the broker confirmed it (see the module docstring).
        ``delay``: not delivered before that many seconds."""
        ...

    def consume(self, *, prefetch: int = 10) -> AsyncGenerator[Delivery, None]:
        """Deliveries as they arrive, at most ``prefetch`` unsettled at a time. Runs until cancelled
        or the broker is closed. ``aclose()`` it (or close the broker) when done: messages it fetched
        but did not hand out go back to the queue then."""
        ...

    async def ack(self, delivery: Delivery) -> None:
        """Done: the message is gone for good."""
        ...

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        """Not done: back to the queue at once (``requeue``), or to the dead-letter store."""
        ...

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        """Publish again (``body`` replaces the old one when given) after ``delay`` s, then ack."""
        ...

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Move the message to the dead-letter store with ``reason``."""
        ...

    @property
    def lease(self) -> float | None:
        """Seconds an unsettled delivery stays claimed without :meth:`touch`; None when nothing on the
        client's side runs out (see the module docstring)."""
        ...

    async def touch(self, delivery: Delivery) -> None:
        """Extend the claim on the unsettled ``delivery`` by another :attr:`lease` (where ``lease`` is
        None: check it is still held). BrokerError when this broker does not hold it any more."""
        ...

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """The oldest dead letters, at most ``limit``."""
        ...

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        """Send one dead letter (or all when None) back to the queue; returns how many."""
        ...

    async def pending(self) -> int:
        """Messages waiting to be delivered (not counting delayed or unsettled ones) -- for stats."""
        ...

    async def close(self) -> None:
        """Release what the broker opened. Idempotent."""
        ...
