"""``memory://[name]``: the in-process broker. The reference implementation of :class:`Broker` and the
test double for the others. Messages die with the process.

Broker objects opened on the same ``memory://name`` (in one process) share one queue, as clients of one
server would; ``memory://`` alone is a private queue. Options: :class:`MemoryBrokerOptions`.

For tests of the code around a broker:

- ``MemoryBroker.from_url("memory://", record=True)``: :attr:`~MemoryBroker.published` lists every
  publish it confirmed as ``(key, body)``, in order, duplicates included (a relay that publishes a
  message twice shows it twice).
- The fault switch :meth:`MemoryBroker.set_down`: while the queue is down, every operation of every
  broker on it (publish, fetching in ``consume()``, settling, the dead-letter calls, ``pending``)
  raises :class:`~crawlherd.errors.BackendUnavailableError` and changes nothing, as a broker that
  cannot be reached does; ``set_down(True, after=n)`` lets ``n`` more publishes through first (the
  broker goes away in the middle of a batch). ``set_down(False)`` brings it back.

Model (shared with ``sqlite://``): every message has an ``available_at`` time; a delivery leases it by
pushing ``available_at`` to now + visibility_timeout under a fresh lease token. Settling needs the
token; an expired lease simply makes the message available again.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from crawlherd._options import Seconds
from crawlherd.brokers import _common
from crawlherd.brokers.base import Broker, DeadLetter, Delivery
from crawlherd.clock import Clock, SystemClock
from crawlherd.errors import BrokerError

__all__ = ["MemoryBroker", "MemoryBrokerOptions", "MemoryStore"]


@dataclass(frozen=True)
class MemoryBrokerOptions(_common.BrokerOptions):
    """``clock``: leases and delays run on it, so a :class:`~crawlherd.clock.FakeClock` drives them in
    tests; ``visibility_timeout``: seconds an unsettled delivery stays leased before it is delivered
    again; ``record``: keep every confirmed publish of this broker object in
    :attr:`MemoryBroker.published`."""

    backend = "memory"

    clock: Clock = field(default_factory=SystemClock)
    visibility_timeout: Seconds = 15.0
    record: bool = False


@dataclass(slots=True, eq=False)
class _Msg:
    id: int
    key: str
    body: bytes
    headers: dict[str, str]
    available_at: float
    lease: str | None = None
    deliveries: int = 0
    version: int = 0


class MemoryStore:
    """The queue every MemoryBroker on one ``memory://name`` shares."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._msgs: dict[int, _Msg] = {}
        self._heap: list[tuple[float, int, int, int]] = []  # (available_at, id, version, seq)
        self._seq = itertools.count()
        self._dead: OrderedDict[str, tuple[DeadLetter, dict[str, str]]] = OrderedDict()
        self._changed = asyncio.Event()
        self.down = False
        self.down_after: int | None = None  # publishes still let through before going down

    def check_up(self, backend: str) -> None:
        """Raise BackendUnavailableError while the queue is down (see MemoryBroker.set_down)."""
        if self.down:
            raise _common.unavailable(f"{backend} is down (set_down)", backend="memory")

    def count_publish(self) -> None:
        """One publish goes through; the queue goes down when ``down_after`` runs out."""
        if self.down_after is not None:
            if self.down_after <= 0:
                self.down, self.down_after = True, None
            else:
                self.down_after -= 1

    def _push(self, m: _Msg) -> None:
        m.version += 1
        heapq.heappush(self._heap, (m.available_at, m.id, m.version, next(self._seq)))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def put(self, key: str, body: bytes, headers: dict[str, str], available_at: float) -> None:
        m = _Msg(next(self._ids), key, body, headers, available_at)
        self._msgs[m.id] = m
        self._push(m)
        self._notify()

    def take(self, now: float, n: int, lease_for: float, max_deliveries: int) -> list[_Msg]:
        out: list[_Msg] = []
        heap = self._heap
        while heap and len(out) < n and heap[0][0] <= now:
            _, mid, version, _ = heapq.heappop(heap)
            m = self._msgs.get(mid)
            if m is None or m.version != version:
                continue  # stale entry
            if max_deliveries and m.deliveries >= max_deliveries:
                self._to_dead(m, f"delivered {m.deliveries} times without being settled", now)
                continue
            m.lease = _common.new_id()
            m.deliveries += 1
            m.available_at = now + lease_for
            self._push(m)
            out.append(m)
        return out

    def next_time(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def _held(self, mid: int, lease: str) -> _Msg:
        m = self._msgs.get(mid)
        if m is None or m.lease != lease:
            raise BrokerError(
                f"message {mid}: the lease was lost (the visibility timeout expired and it was delivered "
                "again, or it was settled already)"
            )
        return m

    def touch(self, mid: int, lease: str, until: float) -> None:
        m = self._held(mid, lease)
        m.available_at = until
        self._push(m)

    def ack(self, mid: int, lease: str) -> None:
        self._held(mid, lease)
        del self._msgs[mid]

    def requeue(self, mid: int, lease: str, available_at: float, body: bytes | None, fresh: bool) -> None:
        m = self._held(mid, lease)
        m.lease = None
        m.available_at = available_at
        if body is not None:
            m.body = body
        if fresh:
            m.deliveries = 0
        self._push(m)
        self._notify()

    def dead_letter(self, mid: int, lease: str, reason: str, now: float) -> None:
        self._to_dead(self._held(mid, lease), reason, now)

    def _to_dead(self, m: _Msg, reason: str, now: float) -> None:
        del self._msgs[m.id]
        dead_id = str(m.id)
        self._dead[dead_id] = (DeadLetter(m.body, m.key, reason, dead_id, now, dict(m.headers)), m.headers)

    def dead_letters(self, limit: int) -> list[DeadLetter]:
        return [d for d, _ in itertools.islice(self._dead.values(), limit)]

    def requeue_dead(self, dead_id: str | None, now: float) -> int:
        ids = list(self._dead) if dead_id is None else [dead_id] if dead_id in self._dead else []
        for i in ids:
            d, headers = self._dead.pop(i)
            self.put(d.key, d.body, headers, now)
        return len(ids)

    def pending(self, now: float) -> int:
        return sum(1 for m in self._msgs.values() if m.available_at <= now)

    @property
    def changed(self) -> asyncio.Event:
        return self._changed


_STORES: weakref.WeakValueDictionary[str, MemoryStore] = weakref.WeakValueDictionary()


class MemoryBroker(_common.BrokerBase):
    """In-process broker; see the module docstring. ``store``: share a queue explicitly."""

    backend = "memory"
    lease_option = "visibility_timeout"

    def __init__(self, *, name: str = "", store: MemoryStore | None = None,
                 options: MemoryBrokerOptions | None = None) -> None:
        super().__init__()
        self.options = options or MemoryBrokerOptions()
        self.name = name
        if store is None:
            if name:
                store = _STORES.get(name)
                if store is None:
                    store = _STORES[name] = MemoryStore()
            else:
                store = MemoryStore()
        self._store: MemoryStore | None = store
        self._clock = self.options.clock
        self._published: list[tuple[str, bytes]] = []

    @classmethod
    def from_url(cls, url: str = "memory://", *, store: MemoryStore | None = None, **options: Any) -> MemoryBroker:
        parts = urlsplit(url)
        name = (parts.netloc + parts.path).strip("/")
        return cls(name=name, store=store, options=_common.build_options(MemoryBrokerOptions, url, options,
                                                                  backend="memory", live=("clock",)))

    def _describe(self) -> str:
        return f"memory://{self.name}"

    @property
    def store(self) -> MemoryStore:
        return self._live(self._store)

    @property
    def published(self) -> list[tuple[str, bytes]]:
        """Every publish this broker confirmed, as ``(key, body)``, in order, duplicates included.
        Only with ``record=True`` (otherwise BrokerError: nothing was recorded)."""
        if not self.options.record:
            raise BrokerError(f"{self!r} does not record publishes: open it with record=True")
        return self._published

    def set_down(self, down: bool = True, *, after: int = 0) -> None:
        """The fault switch (see the module docstring): ``down`` makes every operation on this
        broker's queue raise BackendUnavailableError; with ``after``, only after that many more
        successful publishes. ``set_down(False)`` brings the queue back."""
        if after < 0:
            raise ValueError(f"after must be >= 0, not {after!r}")
        store = self.store
        if down and after:
            store.down, store.down_after = False, after
        else:
            store.down, store.down_after = down, None

    def _check_up(self) -> MemoryStore:
        store = self.store
        store.check_up(repr(self))
        return store

    async def _open(self) -> None:
        return None

    async def _shutdown(self) -> None:
        self._store = None

    # -- protocol ----------------------------------------------------------------------------------

    async def publish(self, body: bytes, *, key: str, headers: Mapping[str, str] | None = None,
                      delay: float = 0.0) -> None:
        hdrs = _common.check_publish(body, key, headers, delay)
        await self._ensure_open()
        store = self.store
        store.count_publish()
        store.check_up(repr(self))
        store.put(key, bytes(body), hdrs, self._clock.now() + delay)
        if self.options.record:
            self._published.append((key, bytes(body)))

    async def _fetch(self, state: Any, n: int) -> Sequence[Delivery]:
        store = self._check_up()
        now = self._clock.now()
        msgs = store.take(now, n, self.options.visibility_timeout, self.options.max_deliveries)
        if msgs:
            return [Delivery(m.body, m.key, f"{m.id}:{m.lease}", m.deliveries > 1, dict(m.headers), raw=m)
                    for m in msgs]
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(store.changed.wait())]
        next_at = store.next_time()
        if next_at is not None:
            waiters.append(asyncio.ensure_future(self._clock.sleep(next_at - now)))
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()
        return []

    @staticmethod
    def _parse(delivery: Delivery) -> tuple[int, str]:
        mid, _, lease = delivery.delivery_id.partition(":")
        return int(mid), lease

    async def _release(self, deliveries: Sequence[Delivery]) -> None:
        self._check_up()  # a broker that is down cannot take them back: they return after their lease
        now = self._clock.now()
        for d in deliveries:
            with contextlib.suppress(BrokerError):  # a lost lease is back in the queue anyway
                self.store.requeue(*self._parse(d), now, None, False)

    async def _touch(self, delivery: Delivery) -> None:
        self._check_up()
        self.store.touch(*self._parse(delivery), self._clock.now() + self.options.visibility_timeout)

    async def ack(self, delivery: Delivery) -> None:
        self._check_held(delivery)
        self._check_up()
        self._take(delivery)
        self.store.ack(*self._parse(delivery))

    async def nack(self, delivery: Delivery, *, requeue: bool = True) -> None:
        if not requeue:
            await self.dead_letter(delivery, "nacked")
            return
        self._check_held(delivery)
        self._check_up()
        self._take(delivery)
        self.store.requeue(*self._parse(delivery), self._clock.now(), None, False)

    async def retry(self, delivery: Delivery, *, delay: float, body: bytes | None = None) -> None:
        _common.check_delay(delay)
        if body is not None:
            _common.check_publish(body, delivery.key, None, delay)
        self._check_held(delivery)
        self._check_up()
        self._take(delivery)
        self.store.requeue(*self._parse(delivery), self._clock.now() + delay,
                           None if body is None else bytes(body), True)

    async def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._check_held(delivery)
        self._check_up()
        self._take(delivery)
        self.store.dead_letter(*self._parse(delivery), reason, self._clock.now())

    async def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        await self._ensure_open()
        return self._check_up().dead_letters(limit)

    async def requeue_dead(self, dead_id: str | None = None) -> int:
        await self._ensure_open()
        return self._check_up().requeue_dead(dead_id, self._clock.now())

    async def pending(self) -> int:
        await self._ensure_open()
        return self._check_up().pending(self._clock.now())


if TYPE_CHECKING:
    _conforms: type[Broker] = MemoryBroker
