"""crawlherd._options: bounds declared in the fields' types, checked by one function, one wording."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

import pytest
from annotated_types import Ge, Le, MaxLen, MinLen

from crawlherd._options import AtLeast0, Count, Delay, NonEmpty, Seconds, check_options
from crawlherd.errors import ConfigurationError


@dataclass(frozen=True)
class _Options:
    shorter_than: ClassVar[tuple[tuple[str, str], ...]] = (("block", "timeout"),)

    batch: Count = 1
    retries: AtLeast0 = 0
    timeout: Seconds = 10.0
    block: Delay = 1.0
    lease: Seconds | None = None
    mode: Literal["a", "b"] = "a"
    name: NonEmpty = "x"
    code: Annotated[str, MinLen(2), MaxLen(3)] = "ab"
    wait: Annotated[int, Ge(0), Le(20)] = 20


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"batch": 0}, "thing option batch=0: must be an integer >= 1"),
        ({"batch": True}, "batch=True: must be an integer >= 1"),
        ({"batch": 1.5}, "batch=1.5: must be an integer >= 1"),
        ({"retries": -1}, "retries=-1: must be an integer >= 0"),
        ({"timeout": 0}, "timeout=0: must be > 0 seconds"),
        ({"timeout": float("inf")}, "timeout=inf: must be > 0 seconds"),
        ({"timeout": "10"}, "timeout='10': must be > 0 seconds"),
        ({"block": -0.5}, "block=-0.5: must be >= 0 seconds"),
        ({"lease": 0}, "lease=0: must be > 0 seconds"),
        ({"mode": "c"}, "mode='c': use 'a' or 'b'"),
        ({"name": ""}, "name='': must not be empty"),
        ({"code": "abcd"}, "code='abcd': must be 2 to 3 characters"),
        ({"wait": 21}, "wait=21: must be an integer >= 0 and <= 20"),
        ({"block": 10.0}, "block=10.0 must be shorter than timeout=10.0"),
    ],
)
def test_each_bound_is_checked_with_one_wording(values: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        check_options(_Options(**values), "thing")  # type: ignore[arg-type]
    assert message in str(info.value)


def test_values_within_their_bounds_pass() -> None:
    check_options(_Options(), "thing")
    check_options(_Options(batch=5, retries=3, timeout=0.5, block=0.0, lease=2, mode="b", name="n", code="abc",
                           wait=0), "thing")
    check_options(_Options(block=0.0, timeout=0.1), "thing")  # 0: not set, no "shorter than" rule
