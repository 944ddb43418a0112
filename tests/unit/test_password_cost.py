"""crawlherd hashes console passwords with Argon2id at RFC 9106's low-memory parameters (the tests use
the cheapest ones: tests/support/passwords.py)."""

from __future__ import annotations

from argon2 import extract_parameters, profiles

from tests.support.passwords import PRODUCT_HASHER


def test_console_passwords_are_hashed_at_rfc_9106_low_memory_cost() -> None:
    digest = PRODUCT_HASHER.hash("correct horse battery")
    assert extract_parameters(digest) == profiles.RFC_9106_LOW_MEMORY
    assert PRODUCT_HASHER.verify(digest, "correct horse battery")
