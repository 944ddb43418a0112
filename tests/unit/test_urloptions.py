"""One coercer turns URL query options and keywords into typed options, for frontiers and brokers alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import pytest

from crawlherd._options import options_from_url, url_options
from crawlherd.brokers import open_broker
from crawlherd.clock import Clock, FakeClock
from crawlherd.errors import ConfigurationError
from crawlherd.frontier import open_scheduler
from crawlherd.frontier.redis import RedisFrontier


@dataclass(frozen=True)
class Opts:
    name: str = "x"
    count: int = 1
    ratio: float = 0.5
    flag: bool = False
    mode: Literal["fast", "safe"] = "safe"
    bits: int | None = None
    clock: Clock | None = None


def parse(url: str, **options: Any) -> Opts:
    return options_from_url(Opts, url, options, what="test")


def test_text_values_take_the_options_types() -> None:
    got = parse("x://h/?name=n&count=3&ratio=2.5&flag=yes&mode=fast&bits=7")
    assert got == Opts(name="n", count=3, ratio=2.5, flag=True, mode="fast", bits=7)
    assert parse("x://h/?flag=OFF&bits=").flag is False
    assert parse("x://h/?bits=").bits is None


def test_keywords_win_and_keep_their_values() -> None:
    clock = FakeClock()
    got = parse("x://h/?count=3&name=url", count=9, clock=clock)
    assert (got.count, got.name, got.clock) == (9, "url", clock)


@pytest.mark.parametrize(
    ("url", "options", "message"),
    [
        ("x://h/?count=many", {}, r"test option count='many' is not an int"),
        ("x://h/?ratio=", {}, r"test option ratio='' is not a float"),
        ("x://h/?flag=maybe", {}, r"flag='maybe' is not a bool \(use 1/true/yes/on or 0/false/no/off\)"),
        ("x://h/?mode=slow", {}, r"test option mode='slow': use 'fast' or 'safe'"),
        ("x://h/", {"mode": "slow"}, r"mode='slow': use 'fast' or 'safe'"),
        ("x://h/?clock=now", {}, r"test option 'clock' cannot be given in the URL"),
        ("x://h/?colour=red", {}, r"unknown test option 'colour'; known options: bits, clock, count, flag, mode"),
    ],
)
def test_mistakes_name_the_option_and_what_it_takes(url: str, options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse(url, **options)


def test_keyword_only_names_are_refused_in_the_url() -> None:
    with pytest.raises(ConfigurationError, match="'name' cannot be given in the URL"):
        url_options("x://h/?name=n", {}, {"name": str}, what="test", keyword_only=("name",))
    assert url_options("x://h/", {"name": "n"}, {"name": str}, what="test", keyword_only=("name",)) == {"name": "n"}


def test_frontier_and_broker_urls_use_it() -> None:
    with pytest.raises(ConfigurationError, match=r"frontier option full_policy='drop': use 'block' or 'raise'"):
        open_scheduler("memory://?full_policy=drop")
    with pytest.raises(ConfigurationError, match=r"frontier option 'client' cannot be given in the URL"):
        open_scheduler("redis://127.0.0.1:6379/0?client=x")
    with pytest.raises(ConfigurationError, match=r"frontier option snapshot_every='often' is not an int"):
        open_scheduler("sqlite:///x.db?snapshot_every=often")
    frontier = open_scheduler("redis://127.0.0.1:6379/0?poll_interval=0.5&dupefilter_bits=&prefix=p")
    assert isinstance(frontier, RedisFrontier)
    assert (frontier.prefix, frontier._poll, frontier._bits) == ("p", 0.5, 13)  # bits from capacity
    with pytest.raises(ConfigurationError, match=r"sqlite broker option max_deliveries='x' is not an int"):
        open_broker("sqlite:///x.db?max_deliveries=x")
    with pytest.raises(ConfigurationError, match=r"memory broker option 'clock' cannot be given in the URL"):
        open_broker("memory://?clock=x")
