"""``redis://``: a frontier shared by any number of worker processes on any number of machines.

``open_scheduler("redis://127.0.0.1:6379/0?prefix=mycrawl")``. Every multi-step operation (enqueue
with its duplicate check, lease with politeness, ack, retry, expiry and reclaim) is one Lua script, so
it is atomic: two workers never take the same request, never both pass a host's delay, and a
fingerprint is recorded exactly when its request is queued. The scripts are ``frontier/lua/*.lua``.

- **Politeness shared by all workers**: host ready times and in-flight counts live in Redis, and so do
  the send gate's clock -- each host's delay held at the server, from the last request's answer
  (``stamp_send``, ``stamp_answer``) -- and the robots.txt files read (``shared_robots_txt``):
  :mod:`._fleet`.
- **Round trips shared by concurrent callers**: the ``next_request``, ``ack``/``fail`` and
  ``stamp_send`` calls (and the waiters' peeks) made while one of their kind is out go together in
  the next script call (:class:`~crawlherd._resilience.Batcher`); each caller gets its own answer.
- **Leases** expire at their deadline (``lease_timeout``), or ``liveness`` seconds (15) after their holder
  last renewed them (:mod:`._liveness`: the frontier object renews what it holds every third of that);
  the next lease call of any worker returns an expired lease's request to its queue, so a worker that
  died loses nothing and its pages come back about ``liveness`` seconds after its death. Every settle
  checks the lease's token: a holder that lost a lease cannot settle it.
- **Duplicate filter**: ``exact`` stores each 64-bit fingerprint in one of ``2**bits`` small sets
  (``P:df:<fp & mask>`` holding ``fp >> bits``), which Redis keeps intset-encoded: about 9 bytes
  per fingerprint instead of the ~88 of a set of hex SHA1 strings. ``bloom`` is a scalable Bloom
  filter in Redis bit strings (``error_rate``, ``capacity``).
- **Serialisation** (:mod:`._codec`): a plain GET is ``"<priority> <depth> <url> <fingerprint>"``,
  anything else the versioned JSON of :meth:`Request.to_record`; never pickle. An entry that cannot be
  read is moved to ``P:bad`` with its reason and logged, and the frontier goes on.
- **Redis going away** (:mod:`._scripts`): every operation raises
  :class:`~crawlherd.errors.BackendUnavailableError` (``role="frontier"``). The client does not retry
  scripts by itself (a lease or an ack must not run twice); the caller retries with backoff. An ack
  retried after such an error may find the lease already settled (:class:`~crawlherd.errors.LeaseError`).
  Nothing queued or leased is lost when Redis comes back, provided Redis persists its data (AOF,
  ``appendfsync everysec`` or ``always``).
- ``dupefilter_unavailable``: ``fail`` (default) raises BackendUnavailableError when the filter's
  keys cannot be used (e.g. a foreign key sits where a bucket should be); ``allow`` queues the
  request unfiltered and counts it in ``stats().dupefilter_unavailable``.

Options of this backend besides the common ones: :class:`~.options.RedisOptions` (``prefix``,
``poll_interval``, ``socket_timeout``, ``dupefilter_bits``, ``wait_replicas``, ``wait_timeout``,
``shards``), and ``client`` (a live ``redis.asyncio.Redis``; not closed by the frontier).

The package, by job: :mod:`.frontier` (:class:`RedisFrontier`: enqueue, lease, settle, politeness),
:mod:`._shards` (the key layout: plain Redis is one shard, ``redis+cluster://`` several; the one place
their difference lives), :mod:`._cluster` (the cluster's slot map), :mod:`._scripts` (the Lua scripts
and the one map of redis-py's errors), :mod:`._codec` (request <-> stored body), :mod:`._liveness` (the
holder's renewals), :mod:`._admin` (stats, entries moved aside, memory, purge).
"""

from __future__ import annotations

from crawlherd.frontier.redis._scripts import SCRIPTS as _SCRIPTS  # noqa: F401 - the scripts' table, for tests
from crawlherd.frontier.redis.frontier import RedisFrontier
from crawlherd.frontier.redis.options import RedisOptions

__all__ = ["RedisFrontier", "RedisOptions"]
