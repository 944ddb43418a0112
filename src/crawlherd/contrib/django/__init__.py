"""A Django app over crawlherd's config DB: add ``"crawlherd.contrib.django"`` to ``INSTALLED_APPS``.

- ``models``: unmanaged models mapping crawlherd's tables (websites, targets, outbox, runs, items; dead
  letters are runs with status ``dead``), so the Django admin lists and edits them. The schema stays
  crawlherd's: create and upgrade it with ``crawlherd db upgrade`` (Alembic), never with Django's
  ``migrate`` (the models are ``managed = False``; a test checks they match crawlherd's tables).
- ``manage.py crawlherd_dispatch [--once]``: the dispatcher service (or one cycle, for cron);
  ``manage.py crawlherd_worker``: a worker.

Settings: ``CRAWLHERD = {"broker_url": "...", ...}`` in the Django settings (any crawlherd setting, see
docs/configuration.md); the config DB defaults to Django's ``default`` database (``"database"`` names
another alias, ``"database_url"`` gives one outright). ``CRAWLHERD_*`` environment variables apply too,
under the ``CRAWLHERD`` dict.
"""

from __future__ import annotations
