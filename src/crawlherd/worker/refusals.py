"""Jobs this worker's own settings refuse: a failure no retry can cure here.

A worker without ``--allow-private`` (``allow_private_addresses``) may not fetch a site on a private or
loopback address; every attempt at such a job would fail the same way, and the job would be dead
after ``max_attempts`` for a reason that is the worker's, not the job's. So the worker asks first
(:func:`own_refusal`: the fetchers' address guard on the job's first listing URL), and a refused job
is given back to the broker untouched -- no attempt spent, no run recorded -- for a worker whose
settings allow it; the worker says so once per website, loudly (:class:`Refusals`).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from crawlherd.errors import AddressNotAllowedError
from crawlherd.fetch.base import FetchLimits
from crawlherd.fetch.guard import check_address, parse_networks
from crawlherd.messages import JobMessage

__all__ = ["Refusals", "own_refusal"]


async def own_refusal(job: JobMessage, limits: FetchLimits) -> str | None:
    """Why this worker's ``limits`` refuse ``job``'s site (its first listing page's address), or None.
    Nothing is resolved when private addresses are allowed."""
    if limits.allow_private_addresses:
        return None
    url = job.site.paginator.first_url(job.search_url)
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        await check_address(parts.hostname or "", port, url=url, allow_private=False,
                            allowed_networks=parse_networks(limits.allowed_networks))
    except AddressNotAllowedError as exc:
        return str(exc)
    return None


class Refusals:
    """The websites this worker refused, each said once as an error."""

    def __init__(self, logger: logging.Logger, who: str) -> None:
        self._log = logger
        self._who = who
        self._said: set[str] = set()

    def refused(self, job: JobMessage, reason: str) -> None:
        """Say (once per website) that ``job`` is given back because of this worker's own settings."""
        website = job.site.name
        if website in self._said:
            self._log.debug("%s: gave job %s back again: %s", self._who, job.idempotency_key, reason)
            return
        self._said.add(website)
        self._log.error(
            "%s: this worker's settings refuse website %r (%s). Its jobs are given back to the queue without "
            "spending an attempt, for a worker that may crawl it; start this one with --allow-private "
            "(or allowed_networks) if it should", self._who, website, reason,
        )
