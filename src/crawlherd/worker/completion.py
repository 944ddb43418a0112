"""A job from its first listing page to ``succeeded``: :class:`JobCompletion`.

The job's owner queues its first listing page and its **marker**, waits for the end of its listing
chain -- reported in process when it read the last page itself, else found in the job's ``job_runs``
row -- then for its **detail pages**: a job is ``succeeded`` only once each detail page its listing
queued is settled, stored or failed with its reason (:mod:`crawlherd.worker.details`; meanwhile
``jobs``, ``explain``, the console and ``crawlherd_detail_pages_out`` say "listing done, N detail pages
still out"). Detail pages with no progress for ``details_stall`` seconds are failed with that reason.

The marker (:func:`~crawlherd.worker.jobcrawl.marker_request`, a request never fetched) is queued
again every ``poll_interval`` while the job runs: a frontier that takes it again has lost the job's
pages (a Redis without persistence restarted empty), and the listing is read again from its first page
by a new chain -- its items upserted, its detail pages still out queued again. See ``docs/guarantees.md``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from dataclasses import dataclass

from crawlherd import metrics
from crawlherd._resilience import with_role
from crawlherd.errors import BackendUnavailableError
from crawlherd.messages import JobMessage
from crawlherd.worker.details import DetailLedger
from crawlherd.worker.jobcrawl import ListingOutcome, ListingState, marker_request
from crawlherd.worker.options import WorkerOptions
from crawlherd.worker.pages import PagePipeline
from crawlherd.worker.runs import RunStore

__all__ = ["JobCompletion", "next_poll"]

log = logging.getLogger(__name__)


def next_poll(interval: float) -> float:
    """Seconds to the next poll: the next multiple of ``interval`` on the loop's clock. The jobs of a worker
    poll at the same moments, so that their reads go out together (one query for all of them, see
    :meth:`~crawlherd.worker.details.DetailLedger.out`) rather than one each at its own time."""
    now = asyncio.get_running_loop().time()
    return interval - now % interval if interval > 0 else 0.0


@dataclass
class _Chains:
    """A job's listing chains: the first, then one more each time the frontier lost its pages; ``lost``
    while the frontier took the job's marker again but the new chain's first page is not queued yet."""

    states: list[ListingState]
    lost: bool = False


class JobCompletion:
    """The jobs of worker ``name``, each from its first listing page to its last detail page settled:
    :meth:`crawl`. ``pages``, ``runs`` and ``details`` are the worker's."""

    def __init__(self, options: WorkerOptions, *, name: str, pages: PagePipeline, runs: RunStore,
                 details: DetailLedger) -> None:
        self.options = options
        self.name = name
        self.pages = pages
        self.runs = runs
        self.details = details

    async def crawl(self, job: JobMessage) -> ListingOutcome:
        """Queue the job's first listing page and its marker, wait for the end of its chain -- reported
        in process when this worker reads the last page, else found in the job's ``job_runs`` row --
        then for its detail pages (:meth:`_details`). Meanwhile the marker is queued again every
        ``poll_interval``: a frontier that takes it again has lost the job's pages (a Redis restarted
        empty), and the listing is read again by a new chain (:meth:`_restart_if_lost`)."""
        site = job.site
        site.extractor()  # no rules and no handler: fail now, not on every page
        state = ListingState(job=job, owner=self.name)
        outcome: asyncio.Future[ListingOutcome] = asyncio.get_running_loop().create_future()
        chains = _Chains([state])
        self.pages.chains[state.run] = outcome
        try:
            with with_role("frontier"):
                await self.pages.queue_listing(site, state.request(site.paginator.first_url(job.search_url)))
                await self.pages.mark(marker_request(state.run))
            while True:
                done, _ = await asyncio.wait({outcome}, timeout=next_poll(self.options.poll_interval))
                if done:
                    listed = outcome.result()
                    break
                remote = await self.runs.reported(job, worker=self.name)
                if remote is not None:
                    listed = remote
                    break
                await self._restart_if_lost(chains, outcome)
            if listed.error is not None:
                # a stale copy of a listing page that failed here, while another worker read the listing to
                # its end and reported it: the reported end wins (the run's row is the listing's record)
                remote = await self.runs.reported(job, worker=self.name)
                if remote is None or remote.error is not None:
                    return listed
                listed = remote
            await self.runs.report(job, worker=self.name, outcome=listed)  # listed_at: "listing done"
            return await self._details(job, chains, listed)
        finally:
            for chain in chains.states:
                self.pages.chains.pop(chain.run, None)

    async def _restart_if_lost(self, chains: _Chains, outcome: asyncio.Future[ListingOutcome]) -> None:
        """Queue the job's marker again: the frontier takes it only when it lost it, with the job's pages;
        the listing is then read again from its first page by a new chain (a new run: the dedup keys
        of the pages of the old one, which may still be in flight somewhere, do not cut it short). Its
        end is the job's listing outcome while the job waits for it; the detail pages out that it
        finds again are queued again. The frontier down: tried again next time."""
        first = chains.states[0]
        job = first.job
        try:
            with with_role("frontier"):
                if not chains.lost and not await self.pages.mark(marker_request(first.run)):
                    return
                chains.lost = True  # until the listing is queued again
                again = first.model_copy(update={"run": uuid.uuid4().hex})
                self.pages.chains[again.run] = (
                    outcome if not outcome.done() else asyncio.get_running_loop().create_future())
                chains.states.append(again)
                await self.pages.queue_listing(job.site, again.request(job.site.paginator.first_url(job.search_url)))
                chains.lost = False
        except BackendUnavailableError as exc:
            log.debug("worker %s: could not check job %s's pages: %s", self.name, job.idempotency_key, exc)
            return
        log.warning("worker %s: the frontier lost job %s's pages (restarted empty?): its listing is read "
                    "again from the first page", self.name, job.idempotency_key)

    async def _details(self, job: JobMessage, chains: _Chains, listed: ListingOutcome) -> ListingOutcome:
        """Wait until none of ``job``'s detail pages is out (stored, or failed with a reason), or until
        their number has not moved for ``details_stall`` seconds -- those are then failed with that reason."""
        last, since, shown = -1, time.monotonic(), 0
        try:
            while True:
                out = await self.details.out(job)
                metrics.DETAILS_OUT.inc(out - shown)
                shown = out
                if out == 0:
                    failed = await self.details.done(job)
                    if failed:
                        log.info("worker %s: job %s: %d detail page(s) failed (`crawlherd explain %d` says why)",
                                 self.name, job.idempotency_key, failed, job.target_id)
                    return listed
                if out != last:
                    last, since = out, time.monotonic()
                elif time.monotonic() - since >= self.options.details_stall:
                    why = f"not settled within details_stall={self.options.details_stall:g}s of no progress"
                    n = await self.details.give_up(job, why)
                    log.warning("worker %s: job %s: %d detail page(s) %s", self.name, job.idempotency_key, n, why)
                    return listed
                await self.details.wait(job, next_poll(self.options.poll_interval))  # or by the last settle here
                await self._restart_if_lost(chains, asyncio.get_running_loop().create_future())
        finally:
            self.details.forget_run(job)
            metrics.DETAILS_OUT.dec(shown)
