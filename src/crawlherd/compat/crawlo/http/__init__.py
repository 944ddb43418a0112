"""Crawlo's ``crawlo.http``: :mod:`.request`."""
