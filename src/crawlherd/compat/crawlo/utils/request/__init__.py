"""Crawlo's ``crawlo.utils.request``: :mod:`.fingerprint`, :mod:`.request`."""
