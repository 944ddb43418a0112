"""The duplicate filters: exactness, compactness, Bloom error rate measured, serialisation."""

from __future__ import annotations

import random

import pytest

from crawlherd.errors import ConfigurationError
from crawlherd.frontier.dupefilter import BloomFilter, ExactFilter, fp_to_int, make_dupefilter
from crawlherd.request import fingerprint


def _fps(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.getrandbits(64) or 1 for _ in range(n)]


def test_exact_filter_is_exact_across_growth() -> None:
    f = ExactFilter(capacity=8)
    values = _fps(20_000, 1)
    assert all(f.add(v) for v in values)
    assert len(f) == 20_000
    assert not any(f.add(v) for v in values)
    assert all(v in f for v in values)
    others = _fps(20_000, 2)
    assert not any(v in f for v in others)


def test_exact_filter_is_compact() -> None:
    f = ExactFilter()
    for v in _fps(200_000, 3):
        f.add(v)
    assert f.nbytes / len(f) < 40  # bytes per fingerprint (Scrapy's set of hex SHA1: ~123 B)


def test_exact_filter_serialises_without_pickle() -> None:
    f = ExactFilter()
    values = _fps(5000, 4)
    for v in values:
        f.add(v)
    g = ExactFilter.from_bytes(f.to_bytes())
    assert len(g) == 5000
    assert all(v in g for v in values)
    with pytest.raises(ValueError, match="version"):
        ExactFilter.from_bytes(b"\x09" + f.to_bytes()[1:])


@pytest.mark.parametrize("error_rate", [1e-2, 1e-3])
def test_bloom_error_rate_holds_empirically(error_rate: float) -> None:
    capacity = 20_000
    bloom = BloomFilter(capacity=capacity, error_rate=error_rate)
    for v in _fps(capacity, 5):
        bloom.add(v)  # may return False: a false positive while filling
    probes = _fps(200_000, 6)
    false_positives = sum(v in bloom for v in probes)
    assert false_positives / len(probes) <= error_rate


def test_bloom_scales_past_capacity_and_keeps_the_rate() -> None:
    bloom = BloomFilter(capacity=1000, error_rate=1e-3)
    inserted = _fps(8000, 7)
    for v in inserted:
        bloom.add(v)
    assert all(v in bloom for v in inserted)  # no false negatives, ever
    probes = _fps(100_000, 8)
    assert sum(v in bloom for v in probes) / len(probes) <= 1e-3
    copy = BloomFilter.from_bytes(bloom.to_bytes())
    assert all(v in copy for v in inserted)
    assert len(copy) == len(bloom)


def test_bloom_refuses_bad_parameters() -> None:
    with pytest.raises(ValueError, match="error_rate"):
        BloomFilter(error_rate=0)
    with pytest.raises(ValueError, match="capacity"):
        BloomFilter(capacity=0)
    with pytest.raises(ConfigurationError, match="dupefilter"):
        make_dupefilter("cuckoo")


def test_fp_to_int_never_zero() -> None:
    assert fp_to_int(b"\x00" * 8) == 1
    assert fp_to_int(fingerprint("GET", "http://a/")) > 0
