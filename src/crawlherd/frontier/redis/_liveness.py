"""The holder's side of the ``redis://`` frontier's liveness lease.

A lease is bound twice: by its deadline, ``lease_timeout`` after it was made (the longest one page may
take on a live holder), and by its holder's liveness: it expires ``liveness`` seconds after it was made
or last renewed. While the frontier object that leased it is open, :class:`Renewal` renews every lease it
holds every third of ``liveness``, in one RENEW script per shard for all of them (never past a lease's
deadline). A holder that dies -- a SIGKILL, a lost machine -- stops renewing, and its leases come back
to the queue about ``liveness`` seconds later (taken back by whichever process leases next), not after
``lease_timeout``. A holder that hangs (SIGSTOP, a stalled event loop) longer than that loses its leases
the same way; when it resumes, its settles are refused (the lease token is checked by every settle) and
its renewal drops the lost tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from crawlherd._aio import cancel_and_wait
from crawlherd.errors import BackendUnavailableError, FrontierError
from crawlherd.frontier.redis._codec import text
from crawlherd.frontier.redis._scripts import RedisCalls

__all__ = ["Renewal"]

log = logging.getLogger("crawlherd.frontier.redis")


class Renewal:
    """The tokens of the leases one frontier object holds, renewed in the background while it is open."""

    def __init__(self, calls: RedisCalls, liveness: float, name: str) -> None:
        self.liveness = liveness
        self.held: set[str] = set()  # lease tokens as the caller sees them
        self._calls = calls
        self._name = name
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def hold(self, *tokens: str) -> None:
        """Leases handed out (or not settled after all): renew them until they are dropped. Starts the
        background renewal."""
        self.held.update(tokens)
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"{self._name}-renew")

    def drop(self, tokens: list[str]) -> None:
        """These leases are being settled: nothing more to renew. (Dropped *before* the settle is sent: a
        renewal racing it would find them gone and take them for lost; held again if the settle fails.)"""
        self.held.difference_update(tokens)

    @contextlib.contextmanager
    def settling(self, token: str) -> Iterator[None]:
        """A settle of lease ``token`` is out: not renewed meanwhile (see :meth:`drop`), held again when
        the settle fails to reach Redis (the lease is still this holder's)."""
        held = token in self.held
        self.drop([token])
        try:
            yield
        except (BackendUnavailableError, FrontierError):
            if held:
                self.hold(token)
            raise

    async def renew(self) -> int:
        """Renew every lease held now: one RENEW per shard. How many were renewed; a lease the frontier
        no longer has (settled meanwhile, or expired and taken back) is dropped."""
        held = list(self.held)
        if not held:
            return 0
        shards = self._calls.shards
        groups = shards.group(held)
        live = repr(float(self.liveness))
        replies = await self._calls.fan(
            [(shards.all[k], "RENEW", (live, " ".join(inner))) for k, inner in groups.items()]
        )
        lost: list[str] = []
        renewed = 0
        for k, reply in zip(groups, replies, strict=True):
            if isinstance(reply, BaseException):
                continue  # that shard's leases stay as they are: the next round tries again
            renewed += len(groups[k]) - len(reply)
            lost += [shards.token(shards.all[k], text(t)) for t in reply]
        if lost:
            log.warning("%s: %d lease(s) were taken back: their deadline (lease_timeout) passed, or this process "
                        "did not renew them in time (it hung or was cut off for more than liveness=%g s); their "
                        "settles will be refused", self._name, len(lost), self.liveness)
            self.drop(lost)
        for reply in replies:
            if isinstance(reply, BaseException):
                raise reply
        return renewed

    async def _run(self) -> None:
        every = self.liveness / 3
        while True:
            await asyncio.sleep(every)
            try:
                await self.renew()
            except (BackendUnavailableError, FrontierError) as exc:  # the page loop says the outage
                log.debug("%s: could not renew its leases: %s", self._name, exc)
            except Exception:  # a bug: say it, and keep renewing what can be (the leases are at stake)
                log.exception("%s: renewing its leases failed", self._name)

    async def close(self) -> None:
        """Stop renewing (the leases still held run out: as for a holder that died)."""
        self._closed = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
