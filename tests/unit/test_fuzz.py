"""Fuzzing the parsers that take input from outside: the job-message decoder (what a broker hands a
worker), the targets-file parser (TOML and YAML, what an operator imports), URL canonicalisation (every
link of every page) and the content-type parser (every response header). Each gets random input and
mutations of valid input; only the documented error may escape (``MessageError``,
``TargetsFileError``, ``InvalidURLError``; the content-type functions raise nothing), and what is
accepted is well-formed.

CI runs a bounded number of examples per target (``CRAWLHERD_FUZZ_EXAMPLES``, default 200, the whole
file in seconds); the long run and its figures are in ``docs/security.md``::

    CRAWLHERD_FUZZ_EXAMPLES=10000 .venv/bin/pytest -n 4 --timeout 0 tests/unit/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import tomllib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tomli_w
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawlherd.content_type import charset_of, decode_body, media_type
from crawlherd.dispatch.targets_file import parse_targets
from crawlherd.errors import InvalidURLError, MessageError, TargetsFileError
from crawlherd.messages import JobMessage, decode_job, encode_job
from crawlherd.sitespec import SiteSpec
from crawlherd.url import canonicalize_url

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FUZZ = settings(
    max_examples=int(os.environ.get("CRAWLHERD_FUZZ_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# JSON-like values: what a broker body, a YAML document or a TOML table can hold.
scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=30,
)


def mutate(value: Any, path: list[int], replacement: Any) -> Any:
    """``value`` with the node that ``path`` picks (an index into each level's keys or items)
    replaced by ``replacement``; a path longer than the nesting replaces the deepest node reached."""
    if not path or not isinstance(value, dict | list) or not value:
        return replacement
    step, rest = path[0], path[1:]
    if isinstance(value, dict):
        key = list(value)[step % len(value)]
        return {**value, key: mutate(value[key], rest, replacement)}
    index = step % len(value)
    return [*value[:index], mutate(value[index], rest, replacement), *value[index + 1:]]


paths = st.lists(st.integers(min_value=0, max_value=50), max_size=6)


def byte_edits(text: str) -> st.SearchStrategy[str]:
    """``text`` with a few characters deleted, inserted or replaced at random places."""

    def edit(edits: list[tuple[int, int, str]]) -> str:
        out = text
        for where, cut, insert in edits:
            at = where % (len(out) + 1)
            out = out[:at] + insert + out[at + cut:]
        return out

    return st.lists(
        st.tuples(st.integers(min_value=0), st.integers(min_value=0, max_value=8), st.text(max_size=8)), max_size=6
    ).map(edit)


# -- the job message ---------------------------------------------------------------------------------

SLOT = datetime(2026, 3, 1, 7, 30, tzinfo=UTC)
VALID_JOB = json.loads(
    encode_job(
        JobMessage.for_slot(
            target_id=42,
            slot_at=SLOT,
            created_at=SLOT + timedelta(seconds=3),
            website_id=7,
            site=SiteSpec(
                name="jobs",
                base_url="https://jobs.example.com",
                search_url_template="https://jobs.example.com/search?q={keywords}",
                pagination={"type": "page_param", "max_pages": 3},
                extraction={"item_selector": "article", "fields": {"title": "h2"}},
            ),
            search_url="https://jobs.example.com/search?q=python",
            keywords_used="python",
            location_used=None,
        )
    )
)


def decodes_or_refuses(body: bytes | str) -> None:
    try:
        message = decode_job(body)
    except MessageError:
        return
    assert decode_job(encode_job(message)) == message  # what is accepted is a whole message


@FUZZ
@given(st.binary(max_size=2000))
def test_job_decoder_on_random_bytes(body: bytes) -> None:
    decodes_or_refuses(body)


@FUZZ
@given(json_values)
def test_job_decoder_on_random_json(value: Any) -> None:
    decodes_or_refuses(json.dumps(value))


@FUZZ
@given(paths, json_values)
def test_job_decoder_on_a_valid_message_with_one_value_changed(path: list[int], replacement: Any) -> None:
    decodes_or_refuses(json.dumps(mutate(VALID_JOB, path, replacement)).encode())


@FUZZ
@given(byte_edits(json.dumps(VALID_JOB)))
def test_job_decoder_on_a_valid_message_with_its_text_edited(body: str) -> None:
    decodes_or_refuses(body)


# -- the targets file --------------------------------------------------------------------------------

EXAMPLE_TOML = (EXAMPLES / "targets.toml").read_text(encoding="utf-8")
EXAMPLE_YAML = (EXAMPLES / "targets.yaml").read_text(encoding="utf-8")
ENVIRON = {"DEMO_URL": "http://127.0.0.1:8080"}


def parses_or_refuses(text: str, fmt: str) -> None:
    try:
        parsed = parse_targets(text, fmt=fmt, environ=ENVIRON)  # type: ignore[arg-type]
    except TargetsFileError as exc:
        problems = exc.problems
        assert problems, "a refusal names at least one problem"
        return
    assert parsed.websites or parsed.targets


@FUZZ
@given(st.text(max_size=3000), st.sampled_from(["toml", "yaml"]))
def test_targets_parser_on_random_text(text: str, fmt: str) -> None:
    parses_or_refuses(text, fmt)


@FUZZ
@given(st.sampled_from(["toml", "yaml"]).flatmap(
    lambda fmt: st.tuples(byte_edits(EXAMPLE_TOML if fmt == "toml" else EXAMPLE_YAML), st.just(fmt))))
def test_targets_parser_on_the_examples_with_their_text_edited(case: tuple[str, str]) -> None:
    parses_or_refuses(*case)


@FUZZ
@given(paths, json_values, st.sampled_from(["toml", "yaml"]))
def test_targets_parser_on_the_example_with_one_value_changed(path: list[int], replacement: Any, fmt: str) -> None:
    document = mutate(tomllib.loads(EXAMPLE_TOML), path, replacement)
    if fmt == "yaml":
        text = yaml.safe_dump(document)
    else:
        try:
            text = tomli_w.dumps(document) if isinstance(document, dict) else json.dumps(document)
        except (TypeError, ValueError):  # TOML cannot hold None or mixed arrays: give it as it is
            text = repr(document)
    parses_or_refuses(text, fmt)


# -- URLs and content types --------------------------------------------------------------------------

url_like = st.text(
    alphabet=st.sampled_from(list("htps:/?#&=%.@[]-_~!$'()*+,;09azAZ \t\n\x00\x7fé中")), max_size=80
).map(lambda tail: "http" + tail) | st.text(max_size=120)


@FUZZ
@given(url_like, st.booleans())
def test_url_canonicalisation_on_random_text(url: str, strip_tracking: bool) -> None:
    try:
        canonical = canonicalize_url(url, strip_tracking=strip_tracking)
    except InvalidURLError:
        return
    assert canonical.startswith(("http://", "https://"))
    assert canonicalize_url(canonical, strip_tracking=strip_tracking) == canonical


@FUZZ
@given(st.text(max_size=200), st.binary(max_size=200), st.text(max_size=30))
def test_content_type_parser_on_random_headers(header: str, body: bytes, label: str) -> None:
    assert media_type(header) == media_type(header).strip().lower()
    charset = charset_of(header)
    assert isinstance(decode_body(body, charset), str)
    assert isinstance(decode_body(body, label), str)


def test_what_the_fuzzing_found_stays_fixed() -> None:
    """Each crashed with an undocumented exception before the fuzzing found it."""
    assert decode_body(b"abc", "\x00") == "abc"  # ValueError: embedded null character
    assert decode_body(b"abc", "base64") == "abc"  # LookupError: not a text encoding
    assert decode_body(b"abc", "undefined") == "abc"  # UnicodeError on every byte
    for number in ("Infinity", "NaN", "1e400"):  # accepted, then encoded as another message
        body = json.dumps({**VALID_JOB, "keywords_used": None}).replace("null", number, 1)
        with pytest.raises(MessageError, match="not valid JSON"):
            decode_job(body)
    document = tomllib.loads(EXAMPLE_TOML)
    for change in ({"name": []}, {"politeness": {"min_delay": []}}, {"politeness": {"min_delay": float("inf")}}):
        broken = {**document, "websites": [{**document["websites"][0], **change}]}
        with pytest.raises(TargetsFileError):  # was TypeError, AttributeError, OverflowError
            parse_targets(yaml.safe_dump(broken), fmt="yaml", environ=ENVIRON)
