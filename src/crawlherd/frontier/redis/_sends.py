"""The fleet's send clock on the ``redis://`` frontier (:class:`~crawlherd.fetch.gate.SendStamps`):
per host, when the next request may leave, shared by every process -- ``send.lua`` stamps a send and
``answer.lua`` its answer (the scripts say why the answer). The stamps one process asks for at once go
in one script call per shard, as do the answers, which are recorded in the background: a request's
caller never waits for its answer to be written."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence

from crawlherd._resilience import Batcher
from crawlherd.frontier.redis._codec import text
from crawlherd.frontier.redis._scripts import RedisCalls

__all__ = ["SEND_HOLD", "SendClock"]

log = logging.getLogger("crawlherd.frontier.redis")

#: Seconds beyond the host's delay that a request another process sent there holds the host while
#: its answer has not come (a slow server, a cancelled request, a process gone).
SEND_HOLD = 1.0

_BATCH = 500
_FORGET_AFTER = 50_000  # stamped sends remembered (an answer never reported: a cancelled fetch)
_CLOSE_WAIT = 2.0  # seconds close() gives the answers still being recorded


class SendClock:
    """``SendClock(calls, ready)``: the send clock of the frontier whose scripts ``calls`` runs;
    ``ready()`` makes sure the frontier is initialised first."""

    def __init__(self, calls: RedisCalls, ready: Callable[[], Awaitable[None]]) -> None:
        self._calls = calls
        self._ready = ready
        self.sends: Batcher[tuple[str, str], str] = Batcher(
            self._send_for, max_batch=_BATCH, name="crawlherd-redis-send"
        )
        self._answers: Batcher[tuple[str, str, str], str] = Batcher(
            self._answer_for, max_batch=_BATCH, name="crawlherd-redis-answer"
        )
        self._stamped: set[tuple[str, str]] = set()
        self._posts: set[asyncio.Task[str]] = set()

    async def stamp(self, host: str, owner: str) -> float:
        """0.0: a request of ``owner`` to ``host`` may leave now (stamped); else the seconds to wait."""
        try:
            reply = await self.sends((host, owner))
        except asyncio.CancelledError:
            self._post(host, owner, "release")  # it may have been stamped: hold the host no longer
            raise
        if reply == "S":
            if len(self._stamped) > _FORGET_AFTER:
                self._stamped.clear()  # their holds expired long ago
            self._stamped.add((host, owner))
            return 0.0
        return float(reply)

    def answered(self, host: str, owner: str) -> None:
        """``owner``'s request to ``host`` came back: recorded in the background (nothing to record
        when it was not stamped: a host without a delay)."""
        if (host, owner) in self._stamped:
            self._stamped.discard((host, owner))
            self._post(host, owner, "answer")

    def _post(self, host: str, owner: str, mode: str) -> None:
        task = asyncio.get_running_loop().create_task(
            self._answers((host, owner, mode)), name="crawlherd-redis-answer-post"
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
        return await self._per_host("SEND", [(host, (owner, repr(SEND_HOLD))) for host, owner in calls])

    async def _answer_for(self, calls: list[tuple[str, str, str]]) -> list[str | BaseException]:
        return await self._per_host("ANSWER", [(host, (owner, mode)) for host, owner, mode in calls])

    async def _per_host(self, name: str, calls: Sequence[tuple[str, tuple[str, ...]]]) -> list[str | BaseException]:
        """Script ``name`` once per shard and arguments, for the hosts asked ``(host, arguments)`` in
        order; each host's reply."""
        await self._ready()
        shards = self._calls.shards
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, (host, args) in enumerate(calls):
            groups.setdefault((shards.of(host).number, args), []).append(i)
        keys = list(groups)
        replies = await self._calls.fan(
            [(shards.all[k], name, (*args, *(calls[i][0] for i in groups[k, args]))) for k, args in keys]
        )
        out: list[str | BaseException] = [""] * len(calls)
        for key, reply in zip(keys, replies, strict=True):
            for n, i in enumerate(groups[key]):
                out[i] = reply if isinstance(reply, BaseException) else text(reply[n])
        return out
