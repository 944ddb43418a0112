"""The code examples of the two documents issue 14 names, as files the tests run.

Each ``crawl4ai_*.py`` is an example of crawl4ai's dispatcher chapter
(``shared/seeds/000_256301331f103272.txt``) and each ``crawlo_*.py`` one of Crawlo's scheduler page
(``shared/seeds/003_a4606d0c84318cc8.txt``), copied as printed there with only the import line changed
(``from crawl4ai import ...`` -> ``from crawlherd import ...``). Where a snippet is an excerpt of the
library's own internals with no import line at all, the file says what was added at its top (imports
only). The tests are ``tests/integration/test_seed_examples.py``.
"""
