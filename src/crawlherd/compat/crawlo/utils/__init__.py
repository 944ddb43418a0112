"""Crawlo's ``crawlo.utils``: the request fingerprint helpers (:mod:`.request`)."""
