"""Duplicate filters over 64-bit fingerprints, compact and serialisable (bytes, never pickle).

- :class:`ExactFilter`: an open-addressing hash table of 8-byte slots in one ``bytearray``
  (no Python object per fingerprint): about 12-23 bytes per fingerprint depending on the load.
- :class:`BloomFilter`: a scalable Bloom filter: one bit array per layer; when a layer holds its
  capacity a new one twice as large with half the error rate is added, so the overall false-positive
  rate stays under ``error_rate``.
"""

from __future__ import annotations

import math
import struct
from typing import Protocol

__all__ = ["BloomFilter", "DupeFilter", "ExactFilter", "fp_to_int", "make_dupefilter"]


def fp_to_int(fp: bytes) -> int:
    """A fingerprint as the unsigned 64-bit integer the filters store (0 is mapped to 1)."""
    return int.from_bytes(fp, "little") or 1


class DupeFilter(Protocol):
    """Set of 64-bit fingerprints (as ints)."""

    def add(self, fp: int) -> bool:
        """Record ``fp``; True when it was not there before."""
        ...

    def __contains__(self, fp: int) -> bool: ...

    def __len__(self) -> int: ...

    @property
    def nbytes(self) -> int:
        """Bytes of memory the filter's storage takes."""
        ...


class ExactFilter:
    """Open addressing with linear probing over a ``bytearray`` of 8-byte slots; 0 marks empty."""

    __slots__ = ("_buf", "_count", "_limit", "_mask", "_slots")

    MAX_LOAD = 0.7

    def __init__(self, capacity: int = 1024) -> None:
        size = 1 << max(4, math.ceil(math.log2(max(capacity, 8) / self.MAX_LOAD)))
        self._allocate(size)
        self._count = 0

    def _allocate(self, size: int) -> None:
        self._buf = bytearray(size * 8)
        self._slots = memoryview(self._buf).cast("Q")
        self._mask = size - 1
        self._limit = int(size * self.MAX_LOAD)

    def _probe(self, fp: int) -> int:
        """The slot of ``fp``: where it is, or the empty slot where it would go (linear probing)."""
        slots = self._slots
        mask = self._mask
        i = fp & mask
        v = slots[i]
        while v and v != fp:
            i = (i + 1) & mask
            v = slots[i]
        return i

    def add(self, fp: int) -> bool:
        slots = self._slots
        i = self._probe(fp)
        if slots[i]:
            return False
        slots[i] = fp
        self._count += 1
        if self._count > self._limit:
            self._grow()
        return True

    def __contains__(self, fp: object) -> bool:
        if not isinstance(fp, int):
            return False
        return bool(self._slots[self._probe(fp)])

    def _grow(self) -> None:
        old = self._slots
        self._allocate((self._mask + 1) * 2)
        slots = self._slots
        mask = self._mask
        for fp in old.tolist():
            if fp:
                i = fp & mask
                while slots[i]:
                    i = (i + 1) & mask
                slots[i] = fp
        old.release()

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return len(self._buf)

    def to_bytes(self) -> bytes:
        return struct.pack("<BQ", 1, self._count) + bytes(self._buf)

    @classmethod
    def from_bytes(cls, data: bytes) -> ExactFilter:
        version, count = struct.unpack_from("<BQ", data)
        if version != 1:
            raise ValueError(f"unknown exact-filter format version {version}")
        self = cls.__new__(cls)
        self._buf = bytearray(data[9:])
        self._slots = memoryview(self._buf).cast("Q")
        self._mask = len(self._slots) - 1
        self._limit = int(len(self._slots) * self.MAX_LOAD)
        self._count = count
        return self


class _BloomLayer:
    __slots__ = ("bits", "capacity", "count", "k", "m")

    def __init__(self, capacity: int, error_rate: float) -> None:
        self.capacity = capacity
        self.m = max(64, math.ceil(-capacity * math.log(error_rate) / (math.log(2) ** 2)))
        self.k = max(1, round(self.m / capacity * math.log(2)))
        self.bits = bytearray((self.m + 7) // 8)
        self.count = 0

    def positions(self, fp: int) -> list[int]:
        # Kirsch-Mitzenmacher double hashing from the two 32-bit halves of the fingerprint.
        h1 = fp & 0xFFFFFFFF
        h2 = (fp >> 32) | 1
        m = self.m
        return [(h1 + i * h2) % m for i in range(self.k)]

    def __contains__(self, fp: int) -> bool:
        bits = self.bits
        return all(bits[p >> 3] & (1 << (p & 7)) for p in self.positions(fp))

    def add(self, fp: int) -> None:
        bits = self.bits
        for p in self.positions(fp):
            bits[p >> 3] |= 1 << (p & 7)
        self.count += 1


class BloomFilter:
    """Scalable Bloom filter with a false-positive rate bounded by ``error_rate``."""

    def __init__(self, capacity: int = 1_000_000, error_rate: float = 1e-7) -> None:
        if not 0 < error_rate < 1:
            raise ValueError(f"error_rate must be between 0 and 1, not {error_rate}")
        if capacity < 1:
            raise ValueError(f"capacity must be positive, not {capacity}")
        self.error_rate = error_rate
        # The layers' error rates form a geometric series (1/2 + 1/4 + ... < 1) times error_rate.
        self._layers = [_BloomLayer(capacity, error_rate / 2)]
        self._count = 0

    def __contains__(self, fp: object) -> bool:
        return isinstance(fp, int) and any(fp in layer for layer in self._layers)

    def add(self, fp: int) -> bool:
        if fp in self:
            return False
        layer = self._layers[-1]
        if layer.count >= layer.capacity:
            layer = _BloomLayer(layer.capacity * 2, self.error_rate / 2 ** (len(self._layers) + 1))
            self._layers.append(layer)
        layer.add(fp)
        self._count += 1
        return True

    def __len__(self) -> int:
        return self._count

    @property
    def nbytes(self) -> int:
        return sum(len(layer.bits) for layer in self._layers)

    def to_bytes(self) -> bytes:
        out = [struct.pack("<BdQI", 1, self.error_rate, self._count, len(self._layers))]
        for layer in self._layers:
            out.append(struct.pack("<QdQ", layer.capacity, 0.0, layer.count))
            out.append(bytes(layer.bits))
        return b"".join(out)

    @classmethod
    def from_bytes(cls, data: bytes) -> BloomFilter:
        version, error_rate, count, nlayers = struct.unpack_from("<BdQI", data)
        if version != 1:
            raise ValueError(f"unknown bloom-filter format version {version}")
        self = cls.__new__(cls)
        self.error_rate = error_rate
        self._count = count
        self._layers = []
        offset = struct.calcsize("<BdQI")
        for i in range(nlayers):
            capacity, _, lcount = struct.unpack_from("<QdQ", data, offset)
            offset += struct.calcsize("<QdQ")
            layer = _BloomLayer(capacity, error_rate / 2 ** (i + 1))
            layer.count = lcount
            n = len(layer.bits)
            layer.bits = bytearray(data[offset : offset + n])
            offset += n
            self._layers.append(layer)
        return self


def make_dupefilter(
    kind: str = "exact", *, capacity: int = 1_000_000, error_rate: float = 1e-7
) -> ExactFilter | BloomFilter:
    """``exact`` or ``bloom``; anything else is a configuration error."""
    from crawlherd.errors import ConfigurationError

    if kind == "exact":
        return ExactFilter()
    if kind == "bloom":
        return BloomFilter(capacity=capacity, error_rate=error_rate)
    raise ConfigurationError(f"unknown dupefilter {kind!r}; use 'exact' or 'bloom'")
