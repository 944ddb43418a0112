"""Every exception crawlherd raises on purpose.

The tree::

    CrawlherdError
    ├── ConfigurationError          bad settings, unknown backend scheme, bad option value
    ├── InvalidURLError             a URL that cannot be crawled (also a ValueError)
    ├── BackendUnavailableError     a service (Redis, PostgreSQL, RabbitMQ, ...) cannot be reached
    ├── FrontierError
    │   ├── QueueFullError          the frontier is at max_size and the policy is "raise"
    │   └── LeaseError              a lease that is unknown, expired or already settled
    ├── FetchError                  one URL could not be fetched (carries url=, request=)
    │   ├── FetchTimeoutError
    │   ├── SendVetoedError         stopped right before it was sent: its session's proxy rests now
    │   ├── BodyTooLargeError       body (or its decompressed form) over max_body_size
    │   ├── TooManyRedirectsError
    │   ├── ContentTypeError        content type not in the allow-list
    │   ├── AddressNotAllowedError  private / loopback / link-local target refused by the guard
    │   ├── RobotsDisallowedError   robots.txt forbids the URL
    │   ├── RobotsUnavailableError  robots.txt could not be read (DNS, refused, timeout, 5xx): not fetched for now
    │   ├── RateLimitedError        still 429/503 after max_retries re-fetches
    │   ├── BlockedError            the site kept answering block pages, through every proxy tier
    │   └── BrowserUnavailableError no Chromium to drive
    ├── RetryLater                  not an error: a page to fetch again later (through another session)
    ├── MemoryPressureError         memory stayed above threshold past memory_wait_timeout
    ├── PageTooComplexError         an HTML page nested too deep or too large to parse within budget
    ├── ScheduleError               a frequency (interval / cron / time zone) that cannot be used
    ├── TargetsFileError            a targets file refused whole; .problems lists every problem
    ├── MessageError                a job message that fails validation or has an unknown version
    ├── JobError                    a job that could not be completed (its listing could not be read)
    │   └── PermanentJobError       one that another attempt cannot fix (robots.txt disallows it): dead at once
    └── BrokerError
        └── PublishError            the broker did not confirm (or returned) a message
            └── MessageRejectedError  the broker answered and refused this message (unroutable, nacked)

Driver exceptions (aiohttp, redis-py, SQLAlchemy, aio-pika) are translated into these at the backend
boundary, so callers only ever need ``except CrawlherdError``. Messages say what was wrong and, when
the user can fix it, how.
"""

from __future__ import annotations

import errno
from typing import Any


class CrawlherdError(Exception):
    """Root of every error crawlherd raises on purpose."""


class RetryLater(CrawlherdError):
    """Raised by a dispatcher's work for a request (not a failure): put the request back in the frontier,
    to be leased again after ``delay`` seconds -- a page that met a block page and will be fetched
    through another session, or that waits for a resting proxy. ``reason`` says why (logs)."""

    def __init__(self, reason: str, *, delay: float = 0.0) -> None:
        super().__init__(reason)
        self.delay = max(0.0, delay)


class ConfigurationError(CrawlherdError):
    """A setting, option or backend URL that cannot be used as given."""


class InvalidURLError(CrawlherdError, ValueError):
    """A URL that cannot be crawled: no or unsupported scheme, bad host or port, control characters."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class BackendUnavailableError(CrawlherdError):
    """A service the backend talks to could not be reached or went away mid-operation: a temporary
    outage. ``backend`` names the kind of service (``"redis"``, ``"amqp"``, ``"database"`` ...);
    ``role`` what it is to the caller (``"frontier"``, ``"broker"``, ``"database"``, ``"sink"``,
    ``"fetch"``), set where the backend maps its driver's errors, so that a caller knows what failed
    without reading the message (see :mod:`crawlherd._resilience`)."""

    def __init__(self, message: str, *, backend: str | None = None, role: str | None = None) -> None:
        super().__init__(message)
        self.backend = backend
        self.role = role


class FrontierError(CrawlherdError):
    """A frontier (scheduler) operation that cannot be carried out."""


class QueueFullError(FrontierError):
    """The frontier holds ``max_size`` requests and its full-policy is ``raise``."""


class LeaseError(FrontierError):
    """A lease that the frontier does not know, that expired, or that was already settled."""


class FetchError(CrawlherdError):
    """One URL could not be fetched. ``url`` and ``request`` say which; ``screenshot`` (a PNG) shows the
    page as it was when a browser fetch that asked for one failed after rendering it."""

    def __init__(self, message: str, *, url: str | None = None, request: Any = None) -> None:
        super().__init__(message)
        self.url = url
        self.request = request
        self.screenshot: bytes | None = None


class FetchTimeoutError(FetchError):
    """Connect, read or total timeout."""


class SendVetoedError(FetchError):
    """A request stopped right before it was sent, after its send gate let it go: what it was to be sent
    under no longer holds (its session's proxy rests after a block page another request met meanwhile;
    :data:`~crawlherd.fetch.gate.SEND_VETO`). Nothing reached the site."""


class BodyTooLargeError(FetchError):
    """The body, or its decompressed form, is larger than ``max_body_size``."""


class TooManyRedirectsError(FetchError):
    """More redirects than ``max_redirects``."""


class ContentTypeError(FetchError):
    """The response's content type is not in the allow-list."""


class AddressNotAllowedError(FetchError):
    """The target resolves to a private, loopback or link-local address and those are not allowed."""


class RobotsDisallowedError(FetchError):
    """robots.txt forbids this URL for our user agent."""


class RobotsUnavailableError(FetchError):
    """robots.txt could not be read (DNS failure, refused connection, timeout, 5xx answer). RFC 9309
    says to crawl nothing of the site meanwhile; unlike :class:`RobotsDisallowedError` it is worth trying
    again later. ``cause`` is the fetch error (None for a 5xx answer)."""

    def __init__(
        self, message: str, *, url: str | None = None, request: Any = None, cause: FetchError | None = None
    ) -> None:
        super().__init__(message, url=url, request=request)
        self.cause = cause


class RateLimitedError(FetchError):
    """The server kept answering with a rate-limit status after every allowed re-fetch."""


class BlockedError(FetchError):
    """The site kept answering block pages (a ban status, a captcha page, a redirect to a block page)
    through every session and proxy tier its fetch profile allows."""


class BrowserUnavailableError(FetchError):
    """No Chromium (or no Playwright) to drive for a target that needs a browser."""


class MemoryPressureError(CrawlherdError, MemoryError):
    """Memory stayed above the threshold for longer than ``memory_wait_timeout``. Also a
    ``MemoryError``, which is what crawl4ai's dispatcher raises then."""


class PageTooComplexError(CrawlherdError):
    """An HTML page refused before parsing: nested deeper, or costlier to parse, than the budget
    (:data:`crawlherd.page.MAX_HTML_DEPTH`, :data:`~crawlherd.page.MAX_HTML_WORK`)."""


class ScheduleError(CrawlherdError):
    """A frequency (interval, cron expression or time zone) that cannot be used."""


class TargetsFileError(CrawlherdError):
    """A targets file that was refused whole. ``problems`` lists each ``(where, message)``."""

    def __init__(self, path: str, problems: list[tuple[str, str]]) -> None:
        lines = "\n".join(f"  {where}: {message}" for where, message in problems)
        super().__init__(f"{path}: {len(problems)} problem(s), nothing imported:\n{lines}")
        self.path = path
        self.problems = problems


class MessageError(CrawlherdError):
    """A job message that fails validation, cannot be decoded, or has an unknown schema version."""


class JobError(CrawlherdError):
    """A scrape job that could not be completed; the worker retries it, then dead-letters it."""


class PermanentJobError(JobError):
    """A scrape job that another attempt cannot fix (robots.txt disallows its listing page): the worker
    dead-letters it at once."""


class BrokerError(CrawlherdError):
    """A broker operation that failed."""


class PublishError(BrokerError):
    """The broker did not confirm a published message, or returned it as unroutable."""


class MessageRejectedError(PublishError):
    """The broker answered and refused the message (returned as unroutable, nacked, too large): trying
    again will not help until something changes. The relay dead-letters an outbox row after a few."""


def summarize(exc: BaseException) -> str:
    """One line for logs and stored errors: ``"TypeName: first line of the message"`` (or the type
    name alone when the message is empty). Driver messages often run to many lines; the first says
    what happened."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


#: The file system's "no room" errors: no space, over the quota, over the process's file size limit.
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def is_disk_full(exc: BaseException) -> bool:
    """True when ``exc`` (or an error it was raised from) says the disk is full: SQLite's
    ``SQLITE_FULL`` (its error code, not its text) or the file system's ``ENOSPC`` / ``EDQUOT`` / ``EFBIG``."""
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return False
        if getattr(seen, "sqlite_errorname", None) == "SQLITE_FULL":
            return True
        if isinstance(seen, OSError) and seen.errno in _NO_ROOM:
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__ or seen.__context__
    return False


def disk_full(what: str, exc: BaseException) -> str:
    """What an operator reads when ``what`` (a store and its file) cannot be written: the disk is full,
    what to do, and that crawlherd carries on by itself."""
    return (f"{what}: the disk is full ({summarize(exc)}): free space on its file system -- crawlherd "
            "carries on by itself once it can write again")
