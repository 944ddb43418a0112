"""What the processes sharing a ``redis://`` frontier share besides its queue, for politeness:

- :class:`SendClock` (:class:`~crawlherd.fetch.gate.SendStamps`): per host, when the next request may
  leave -- ``send.lua`` stamps a send and ``answer.lua`` its answer (the scripts say why the answer).
  The stamps one process asks for at once go in one script call per shard, as do the answers, which are
  recorded in the background: a request's caller never waits for its answer to be written.
- :class:`RobotsTexts` (:class:`~crawlherd.fetch.robots.SharedRobots`): the robots.txt files read, one
  string each (``<KP>:robots:<origin>``: ``"<status>\t<text>"``), expiring with their cache time, and the
  claims on their fetch (``<KP>:robots:<origin>:claim``, expiring by themselves).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import cast
from urllib.parse import urlsplit

from crawlherd._resilience import Batcher
from crawlherd.clock import Clock
from crawlherd.frontier.redis._codec import text
from crawlherd.frontier.redis._scripts import RedisCalls
from crawlherd.frontier.redis._shards import Shard

__all__ = ["SEND_HOLD", "RobotsTexts", "SendClock"]

log = logging.getLogger("crawlherd.frontier.redis")

#: Seconds beyond the host's delay that a request another process sent there holds the host while
#: its answer has not come (a slow server, a cancelled request, a process gone).
SEND_HOLD = 1.0

_BATCH = 500
_FORGET_AFTER = 50_000  # stamped sends remembered (an answer never reported: a cancelled fetch)
_CLOSE_WAIT = 2.0  # seconds close() gives the answers still being recorded


class SendClock:
    """``SendClock(calls, ready, clock)``: the send clock of the frontier whose scripts ``calls`` runs;
    ``ready()`` makes sure the frontier is initialised first; ``clock`` is the frontier's."""

    def __init__(self, calls: RedisCalls, ready: Callable[[], Awaitable[None]], clock: Clock) -> None:
        self._calls = calls
        self._ready = ready
        self._clock = clock  # the frontier's: the scripts' times are on it
        self.sends: Batcher[tuple[str, str], str] = Batcher(
            self._send_for, max_batch=_BATCH, name="crawlherd-redis-send"
        )
        self._answers: Batcher[tuple[str, str, str, str, str], str] = Batcher(
            self._answer_for, max_batch=_BATCH, name="crawlherd-redis-answer"
        )
        # (host, owner) of this process's stamped requests not yet answered: the task sending it, an
        # event set by its answer, and its slot (as send.lua wrote it)
        self._out: dict[tuple[str, str], tuple[asyncio.Task[object] | None, asyncio.Event, str]] = {}
        self._posts: set[asyncio.Task[str]] = set()

    async def stamp(self, host: str, owner: str) -> tuple[float, bool]:
        """(seconds, go): ``owner``'s request to ``host`` leaves after these seconds (go: its slot is
        taken), or asks again after them (see ``send.lua``). A request of ``owner`` to ``host`` that has
        its slot and no answer yet holds the host for the others of this process too (for ``SEND_HOLD``
        at most), as ``send.lua`` holds it for other processes: two requests in flight at once may reach
        the server in either order, whatever their slots. (A request asking before the first's slot
        came back is held by ``send.lua`` itself.) The same task asking again (a redirect's next hop)
        follows its own answer and is not held."""
        key = (host, owner)
        out = self._out.get(key)
        if out is not None and out[0] is not asyncio.current_task() and not out[1].is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SEND_HOLD):
                    await out[1].wait()
        try:
            reply = await self.sends((host, owner))
        except asyncio.CancelledError:
            self._post(host, owner, "release", "-")  # it may have taken a slot: hold the host no longer
            raise
        if reply[0] == "S":
            if len(self._out) > _FORGET_AFTER:
                self._out.clear()  # requests never answered (cancelled fetches): they hold nothing by now
            self._out[key] = (asyncio.current_task(), asyncio.Event(), reply[1:])
            # the slot's time, not a wait: the reply took a while to be read
            return max(0.0, float(reply[1:]) - self._clock.now()), True
        wait = float(reply)
        return wait, wait == 0.0

    def answered(self, host: str, owner: str) -> None:
        """``owner``'s request to ``host`` came back: recorded in the background (nothing to record
        when it was not stamped: a host without a delay). It names the request's slot: recorded after the
        owner's next request there took its slot, it must not end that one's hold."""
        out = self._out.pop((host, owner), None)
        if out is not None:
            out[1].set()
            self._post(host, owner, "answer", out[2])

    def _post(self, host: str, owner: str, mode: str, slot: str) -> None:
        # the time of the answer is now, not when the script runs: a busy process records it later
        task = asyncio.get_running_loop().create_task(
            self._answers((host, owner, mode, repr(self._clock.now()), slot)), name="crawlherd-redis-answer-post"
        )
        self._posts.add(task)
        task.add_done_callback(self._posted)

    def _posted(self, task: asyncio.Task[str]) -> None:
        self._posts.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.debug("an answer was not recorded in the send clock (its hold ends by itself): %s", exc)

    async def close(self) -> None:
        """Let the answers being recorded finish (a while at most), then stop."""
        if self._posts:
            await asyncio.wait(set(self._posts), timeout=_CLOSE_WAIT)
        await self.sends.close()
        await self._answers.close()

    async def _send_for(self, calls: list[tuple[str, str]]) -> list[str | BaseException]:
        return await self._per_host("SEND", [(host, (owner, repr(SEND_HOLD)), host) for host, owner in calls])

    async def _answer_for(self, calls: list[tuple[str, str, str, str, str]]) -> list[str | BaseException]:
        return await self._per_host(
            "ANSWER", [(h, (owner, mode), f"{at} {slot} {h}") for h, owner, mode, at, slot in calls]
        )

    async def _per_host(
        self, name: str, calls: Sequence[tuple[str, tuple[str, ...], str]]
    ) -> list[str | BaseException]:
        """Script ``name`` once per shard and arguments, for the calls ``(host, arguments, its own
        argument)`` in order; each one's reply."""
        await self._ready()
        shards = self._calls.shards
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, (host, args, _) in enumerate(calls):
            groups.setdefault((shards.of(host).number, args), []).append(i)
        keys = list(groups)
        replies = await self._calls.fan(
            [(shards.all[k], name, (*args, *(calls[i][2] for i in groups[k, args]))) for k, args in keys]
        )
        out: list[str | BaseException] = [""] * len(calls)
        for key, reply in zip(keys, replies, strict=True):
            for n, i in enumerate(groups[key]):
                out[i] = reply if isinstance(reply, BaseException) else text(reply[n])
        return out


class RobotsTexts:
    """``RobotsTexts(calls)``: robots.txt files on the shards of the frontier whose calls ``calls`` runs
    (an origin's on its host's shard)."""

    def __init__(self, calls: RedisCalls) -> None:
        self._calls = calls

    def _key(self, origin: str) -> tuple[Shard, str]:
        shard = self._calls.shards.of(urlsplit(origin).netloc.lower())
        return shard, f"{shard.kp}:robots:{origin}"

    async def get(self, origin: str) -> tuple[int, str] | None:
        shard, key = self._key(origin)

        async def read() -> bytes | None:
            client = await self._calls.shards.client(shard.slot)
            return cast("bytes | None", await client.get(key))

        raw = await self._calls.guard(read)
        if raw is None:
            return None
        status, _, body = raw.decode("utf-8", "replace").partition("\t")
        return (int(status), body) if status.isdigit() else None

    async def put(self, origin: str, status: int, text: str, ttl: float) -> None:
        shard, key = self._key(origin)

        async def write() -> None:
            client = await self._calls.shards.client(shard.slot)
            await client.set(key, f"{status}\t{text}".encode(), px=max(1, int(ttl * 1000)))

        await self._calls.guard(write)

    async def claim(self, origin: str, seconds: float) -> bool:
        """``<KP>:robots:<origin>:claim``, set if absent, expiring after ``seconds``: True if set here."""
        shard, key = self._key(origin)

        async def take() -> bool:
            client = await self._calls.shards.client(shard.slot)
            return bool(await client.set(f"{key}:claim", b"1", nx=True, px=max(1, int(seconds * 1000))))

        return await self._calls.guard(take)

    async def release(self, origin: str) -> None:
        shard, key = self._key(origin)

        async def drop() -> None:
            client = await self._calls.shards.client(shard.slot)
            await client.delete(f"{key}:claim")

        await self._calls.guard(drop)
