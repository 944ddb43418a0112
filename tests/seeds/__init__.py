"""The code examples of the two documents issue 14 names, as files the tests run.

Each ``crawl4ai_*.py`` is an example of crawl4ai's dispatcher chapter
(``shared/seeds/000_256301331f103272.txt``) and each ``crawlo_*.py`` one of Crawlo's scheduler page
(``shared/seeds/003_a4606d0c84318cc8.txt``), copied as printed there with only the import line changed
(``from crawl4ai import ...`` -> ``from crawlherd import ...``). Where a snippet is an excerpt of the
library's own internals with no import line at all, the file says what was added at its top (imports
only). The tests are ``tests/integration/test_seed_examples.py`` (crawl4ai) and
``tests/integration/test_seed_crawlo.py`` (Crawlo).

What is not a file here, and why:

- crawl4ai's three "Implementation Details" excerpts are crawl4ai's own internals; two are files
  (``crawl4ai_07``: its memory-monitor rule, checked against crawlherd's dispatcher reading for reading;
  ``crawl4ai_08``: its SemaphoreDispatcher excerpt, run as a custom dispatcher) and the third (the
  constructor) is in ``crawl4ai_07`` too.
- Crawlo's page shows its scheduler's own methods (``enqueue_request``, ``next_request``, the
  exception handling around ``queue_manager`` and ``filter``, the logging lines). They are not user
  code; what they promise -- False for a duplicate, the log lines' wording, ``Queue is full``,
  ``QueueFullException`` / ``FilterConnectionException`` -- is checked in ``test_seed_crawlo.py``.
- ``crawlo_07_batch.py`` has ``await`` before ``scheduler.enqueue_request(...)``: crawlherd's scheduler
  methods are coroutines (a documented difference); the test runs it with top-level await.
"""
