"""Console passwords hashed with Argon2's cheapest parameters in the tests, as Django's test settings swap
in a fast hasher: the suite makes and checks hundreds of passwords, and the parameters crawlherd ships with
(RFC 9106's low-memory profile) cost about 0.3 s of CPU for each. Installed in every test process
(``tests/conftest.py``) and in the fork server's children (``tests/support/_forkserver_main.py``); a
process started with ``subprocess`` uses the real parameters. ``tests/unit/test_password_cost.py`` checks
what crawlherd ships with."""

from __future__ import annotations

from argon2 import PasswordHasher, profiles

from crawlherd.console import users

__all__ = ["PRODUCT_HASHER", "cheap_password_hashes"]

#: The hasher crawlherd ships with, kept before the tests swap it.
PRODUCT_HASHER: PasswordHasher = users._hasher


def cheap_password_hashes() -> None:
    users._hasher = PasswordHasher.from_parameters(profiles.CHEAPEST)
