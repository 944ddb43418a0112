"""crawl4ai's ``crawl4ai.components``: :mod:`.crawler_monitor`."""
