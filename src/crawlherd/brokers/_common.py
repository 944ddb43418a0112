"""What every broker shares: option parsing, argument checks, prefetch bookkeeping, the consume loop.

A backend subclasses :class:`BrokerBase` and provides ``_open``, ``_fetch`` (up to ``n`` deliveries,
waiting a while when there are none), ``_release`` (put unsettled deliveries back), ``_shutdown`` and
the settle operations. The base class keeps the rules that must not differ between backends:

- every delivery belongs to the ``consume()`` session that yielded it; a session never holds more than
  ``prefetch`` unsettled deliveries;
- a delivery is settled once, through the broker that delivered it (settling it again, or through
  another broker object, raises :class:`~crawlherd.errors.BrokerError`);
- ``close()`` stops every ``consume()`` loop promptly and gives the unsettled deliveries back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from crawlherd._options import AtLeast0, check_options, options_from_url
from crawlherd.brokers.base import Delivery
from crawlherd.errors import BackendUnavailableError, BrokerError

__all__ = ["BrokerBase", "BrokerOptions", "build_options", "check_publish", "new_id", "unavailable"]

log = logging.getLogger("crawlherd.brokers")

T = TypeVar("T")

# Header names the brokers use for their own bookkeeping; publishers may not set them.
RESERVED_HEADER_PREFIX = "x-crawlherd-"


def unavailable(message: str, *, backend: str) -> BackendUnavailableError:
    """The outage error of a broker: ``backend`` its kind, ``role`` always ``"broker"`` (what the service
    is to the caller; see :mod:`crawlherd._resilience`). Each backend raises it from its one mapping of
    its driver's errors."""
    return BackendUnavailableError(message, backend=backend, role="broker")


def new_id() -> str:
    """A random 128-bit identifier, hex."""
    return uuid.uuid4().hex


def build_options(cls: type[T], url: str, options: Mapping[str, Any], *, backend: str,
                  live: Sequence[str] = ()) -> T:
    """``cls`` (a dataclass of options) from ``url``'s query string and ``options`` (which win), by the
    one URL-options coercer of frontiers and brokers (:mod:`crawlherd._options`); messages name the
    ``backend``'s broker. ``live`` names more options that may only come as keywords (an option whose
    type cannot be read from text, a clock or a client, already can only)."""
    return options_from_url(cls, url, options, what=f"{backend} broker", keyword_only=live)


@dataclass(frozen=True)
class BrokerOptions:
    """What the options of every broker have: ``max_deliveries``, the deliveries of a message after
    which it is dead-lettered (0: no limit of crawlherd's). A backend's options subclass it, name their
    ``backend`` and declare their bounds in their fields' types (:mod:`crawlherd._options`)."""

    backend: ClassVar[str] = ""
    #: Pairs of options whose first must be shorter than the second (see crawlherd._options).
    shorter_than: ClassVar[tuple[tuple[str, str], ...]] = ()

    max_deliveries: AtLeast0 = 10

    def __post_init__(self) -> None:
        check_options(self, f"{self.backend} broker")


def check_publish(body: bytes, key: str, headers: Mapping[str, str] | None, delay: float) -> dict[str, str]:
    """Validate publish arguments; the headers as a plain dict."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"message body must be bytes, not {type(body).__name__}")
    if not isinstance(key, str) or not key:
        raise ValueError("message key must be a non-empty string (the idempotency key target_id:slot_at)")
    if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
        raise ValueError(f"delay must be a finite number of seconds >= 0, not {delay!r}")
    out: dict[str, str] = {}
    for name, value in (headers or {}).items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(f"message headers must map str to str; got {name!r}: {value!r}")
        if name.lower().startswith(RESERVED_HEADER_PREFIX):
            raise ValueError(f"header {name!r}: names starting with {RESERVED_HEADER_PREFIX!r} are reserved")
        out[name] = value
    return out


def check_delay(delay: float) -> None:
    if not isinstance(delay, int | float) or not math.isfinite(delay) or delay < 0:
        raise ValueError(f"delay must be a finite number of seconds >= 0, not {delay!r}")


class Session:
    """One ``consume()`` call: its prefetch bound and its unsettled deliveries."""

    __slots__ = ("_room", "outstanding", "prefetch")

    def __init__(self, prefetch: int) -> None:
        self.prefetch = prefetch
        self.outstanding: set[str] = set()
        self._room = asyncio.Event()
        self._room.set()

    @property
    def room(self) -> int:
        return self.prefetch - len(self.outstanding)

    def add(self, delivery_id: str) -> None:
        self.outstanding.add(delivery_id)
        if self.room <= 0:
            self._room.clear()

    def discard(self, delivery_id: str) -> None:
        self.outstanding.discard(delivery_id)
        if self.room > 0:
            self._room.set()

    async def wait_room(self) -> bool:
        await self._room.wait()
        return True


class BrokerBase:
    """Shared machinery; see the module docstring. Subclasses set ``backend`` (for messages)."""

    backend = "broker"
    #: The backend's options (a dataclass; see :func:`build_options`).
    options: Any

    def __init__(self) -> None:
        self._closed = False
        self._opened = False
        self._open_lock: asyncio.Lock | None = None
        self._closing: asyncio.Event | None = None
        # delivery_id -> (delivery, session); the deliveries this object handed out and not settled
        self._outstanding: dict[str, tuple[Delivery, Session | None]] = {}
        # fetched from the broker by a consume() loop but not handed out yet
        self._unyielded: dict[str, Delivery] = {}
        # deliveries whose settle is on its way to the broker: no longer outstanding (their session has
        # room again), but still the broker's, so a consume() loop must not take them back meanwhile
        self._settling_ids: set[str] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._describe()} {'closed' if self._closed else 'open'}>"

    def _describe(self) -> str:
        """Where this broker is (URL redacted) and what it serves, for messages and ``repr``."""
        return self.backend

    def _live(self, resource: T | None) -> T:
        """``resource`` (a client, a connection, a store) while the broker is open; BrokerError once it is
        closed (the resource is then None)."""
        if resource is None:
            raise BrokerError(f"{self!r} is closed")
        return resource

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> Any:
        await self._ensure_open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def _closing_event(self) -> asyncio.Event:
        if self._closing is None:
            self._closing = asyncio.Event()
        return self._closing

    async def _ensure_open(self) -> None:
        if self._closed:
            raise BrokerError(f"{self!r} is closed")
        if self._opened:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._open()
                self._opened = True

    async def close(self) -> None:
        """Stop every consume() loop, give unsettled deliveries back, release what was opened.
        Idempotent; never raises for a broker that already went away (that is logged)."""
        if self._closed:
            return
        self._closed = True
        self._closing_event().set()
        leftovers = [d for d, _ in self._outstanding.values()] + list(self._unyielded.values())
        self._outstanding.clear()
        self._unyielded.clear()
        try:
            if self._opened and leftovers:
                try:
                    async with asyncio.timeout(5.0):
                        await self._release(leftovers)
                except Exception as exc:  # noqa: BLE001 - best effort: they come back after their lease anyway
                    log.warning("%r: could not give back %d unsettled deliveries on close (%s); they return "
                                "after their lease", self, len(leftovers), exc)
        finally:
            await self._shutdown()

    # -- consume -----------------------------------------------------------------------------------

    async def consume(self, *, prefetch: int = 10) -> AsyncGenerator[Delivery, None]:
        """Deliveries as they arrive, at most ``prefetch`` unsettled at a time (see base.Broker)."""
        if not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be an int >= 1, not {prefetch!r}")
        await self._ensure_open()
        session = Session(prefetch)
        state = await self._start_consume(session)
        batch: list[Delivery] = []
        try:
            while True:
                if session.room <= 0 and not await self._race(session.wait_room()):
                    return
                if self._closed:
                    return
                fetched = await self._race(self._fetch(state, session.room))
                if fetched is None:
                    return
                batch = list(fetched)
                self._unyielded.update((d.delivery_id, d) for d in batch)
                while batch:
                    delivery = batch.pop(0)
                    if self._unyielded.pop(delivery.delivery_id, None) is None:
                        return  # the broker was closed meanwhile and gave it back
                    self._outstanding[delivery.delivery_id] = (delivery, session)
                    session.add(delivery.delivery_id)
                    yield delivery
        finally:
            # fetched but never handed out: back to the queue at once (close() does it when closing)
            batch = [d for d in batch if self._unyielded.pop(d.delivery_id, None) is not None]
            if batch and not self._closed:
                try:
                    await asyncio.shield(self._release(batch))
                except Exception as exc:  # noqa: BLE001
                    log.warning("%r: could not give back %d fetched deliveries (%s); they return after "
                                "their lease", self, len(batch), exc)
            await self._stop_consume(state)
            # deliveries already handed out stay settle-able; they no longer count against a session
            for delivery_id in session.outstanding:
                entry = self._outstanding.get(delivery_id)
                if entry is not None:
                    self._outstanding[delivery_id] = (entry[0], None)

    async def _race(self, aw: Awaitable[T]) -> T | None:
        """``aw``'s result, or None when the broker is closed first (``aw`` is then cancelled)."""
        closing = self._closing_event()
        if closing.is_set():
            if asyncio.iscoroutine(aw):
                aw.close()
            return None
        task = asyncio.ensure_future(aw)
        waiter = asyncio.ensure_future(closing.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            waiter.cancel()
            raise
        waiter.cancel()
        if task.done():
            if closing.is_set() and not task.cancelled() and (error := task.exception()) is not None:
                # the fetch met the close (the client already gone): the consumer ends, as on any close
                log.debug("%r: a fetch failed as the broker closed: %s", self, error)
                return None
            return task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        except Exception as exc:  # noqa: BLE001 - closing anyway
            log.debug("%r: error while stopping a fetch on close: %s", self, exc)
        return None

    # -- settlement bookkeeping ----------------------------------------------------------------------

    def _check_held(self, delivery: Delivery) -> None:
        """Raise BrokerError unless this broker holds ``delivery`` unsettled."""
        if self._closed:
            raise BrokerError(f"{self!r} is closed; its unsettled deliveries went back to the queue")
        if delivery.delivery_id not in self._outstanding:
            raise BrokerError(
                f"delivery {delivery.delivery_id} (key {delivery.key!r}) is not held by {self!r}: it was "
                "already settled, or another broker object delivered it"
            )

    def _take(self, delivery: Delivery) -> None:
        """Mark ``delivery`` settled here, or raise when this broker does not hold it."""
        self._check_held(delivery)
        entry = self._outstanding.pop(delivery.delivery_id)
        if entry[1] is not None:
            entry[1].discard(delivery.delivery_id)

    def _untake(self, delivery: Delivery) -> None:
        """Undo :meth:`_take` after a settle operation failed before reaching the broker."""
        if not self._closed:
            self._outstanding[delivery.delivery_id] = (delivery, None)

    async def _settle_with(self, delivery: Delivery, operation: Callable[[], Awaitable[object]], lost: str) -> None:
        """Settle ``delivery`` by ``operation``, which returns whether the broker still held it under this
        consumer's lease. Unreachable broker: the delivery stays held here (settle it again later);
        lease lost: BrokerError(``lost``)."""
        self._take(delivery)
        self._settling_ids.add(delivery.delivery_id)
        try:
            done = await operation()
        except BackendUnavailableError:
            self._untake(delivery)
            raise
        finally:
            self._settling_ids.discard(delivery.delivery_id)
        if not done:
            raise BrokerError(lost)

    # -- leases ------------------------------------------------------------------------------------

    #: The option (of ``self.options``) that says how long a claim lasts; None: no client-side lease.
    lease_option: ClassVar[str | None] = None

    @property
    def lease(self) -> float | None:
        """Seconds an unsettled delivery stays claimed without :meth:`touch` (None: no client-side limit)."""
        if self.lease_option is None:
            return None
        return float(getattr(self.options, self.lease_option))

    async def touch(self, delivery: Delivery) -> None:
        """Extend the claim on ``delivery`` by another :attr:`lease` (nothing to do when the broker has
        no client-side lease). BrokerError when this broker does not hold it."""
        self._check_held(delivery)
        await self._touch(delivery)

    async def _touch(self, delivery: Delivery) -> None:
        return None

    # -- to implement ------------------------------------------------------------------------------

    async def _open(self) -> None:
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    async def _start_consume(self, session: Session) -> Any:
        return None

    async def _stop_consume(self, state: Any) -> None:
        return None

    async def _fetch(self, state: Any, n: int) -> Sequence[Delivery]:
        """Up to ``n`` (>= 1) deliveries; may return none after waiting a while."""
        raise NotImplementedError

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        """Put unsettled deliveries back in the queue at once."""
        raise NotImplementedError
