"""The job message, schema v2 (the website's SiteSpec typed in ``site``): valid messages round-trip; bad
ones raise MessageError, never crash; version-1 bodies still on a broker decode into the same message."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlherd.errors import MessageError
from crawlherd.messages import (
    _JOB_NAMESPACE,
    BODY_FIELDS,
    JobMessage,
    SlotBodies,
    _job_uuid,
    decode_job,
    encode_job,
    idempotency_key,
    job_id_for,
)
from crawlherd.sitespec import SiteSpec

SLOT = datetime(2026, 3, 1, 7, 30, tzinfo=UTC)
SITE = SiteSpec(
    name="jobs-example",
    base_url="https://jobs.example.com",
    search_url_template="https://jobs.example.com/search?q={keywords}&l={location}",
    requires_playwright=True,
    pagination={"type": "page_param", "max_pages": 3},
    extraction={"item_selector": "article", "fields": {"title": "h2"}},
    politeness={"min_delay": 2.0},
)


def make(**overrides: Any) -> JobMessage:
    fields: dict[str, Any] = {
        "target_id": 42,
        "slot_at": SLOT,
        "created_at": SLOT + timedelta(seconds=3),
        "website_id": 7,
        "site": SITE,
        "search_url": "https://jobs.example.com/search?q=python&l=Berlin",
        "keywords_used": "python",
        "location_used": "Berlin",
    }
    fields.update(overrides)
    return JobMessage.for_slot(**fields)


def test_round_trip_and_wire_form() -> None:
    message = make()
    body = encode_job(message)
    data = json.loads(body)
    assert data["schema_version"] == 2
    assert data["site"]["politeness"] == {"min_delay": 2.0, "max_concurrency": 2, "robots": "obey"}
    assert data["idempotency_key"] == "42:2026-03-01T07:30:00Z" == idempotency_key(42, SLOT)
    assert data["slot_at"] == "2026-03-01T07:30:00Z"
    assert data["attempt_count"] == 0
    decoded = decode_job(body)
    assert decoded == message
    assert decoded.site.rules == SITE.rules and decoded.site.paginator == SITE.paginator  # built, typed


def test_job_id_and_key_are_stable_per_target_and_slot() -> None:
    assert make().job_id == make(created_at=SLOT + timedelta(hours=1)).job_id == job_id_for(42, SLOT)
    assert make().job_id != make(slot_at=SLOT + timedelta(minutes=1)).job_id
    other_zone = SLOT.astimezone(timezone(timedelta(hours=5)))
    assert idempotency_key(42, other_zone) == idempotency_key(42, SLOT)
    assert idempotency_key(1, SLOT.replace(microsecond=500)) == "1:2026-03-01T07:30:00.000500Z"


def good() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(encode_job(make()))
    return data


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"", "not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 32"),  # json.loads: RecursionError
        (b'{"schema_version": [2]}', "unknown job message schema_version"),  # unhashable: TypeError
        (b'{"schema_version": 2, "s": "' + b"a" * 1_000_001 + b'"}', "larger than the 1,000,000-byte limit"),
        (b'{"a": "[[[[' + b"[" * 100 + b'"}', "no schema_version"),  # brackets inside a string do not nest
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b"{}", "no schema_version"),
        (json.dumps({**good(), "schema_version": 3}).encode(), "unknown job message schema_version 3"),
        (json.dumps({**good(), "schema_version": "1"}).encode(), "unknown job message schema_version"),
        (json.dumps({**good(), "schema_version": True}).encode(), "unknown job message schema_version"),
        (json.dumps({**good(), "target_id": 0}).encode(), "target_id"),
        (json.dumps({**good(), "search_url": "file:///etc/passwd"}).encode(), "search_url"),
        (json.dumps({**good(), "slot_at": "2026-03-01T07:30:00"}).encode(), "slot_at"),
        (json.dumps({**good(), "idempotency_key": "42:yesterday"}).encode(), "does not match"),
        (json.dumps({**good(), "site": {**good()["site"], "pagination": {"type": "infinite"}}}).encode(), "pagination"),
        (json.dumps({**good(), "site": {**good()["site"], "extraction": {"item_selector": "::"}}}).encode(), "CSS"),
        (json.dumps({**good(), "site": {**good()["site"], "robots": "obey"}}).encode(), "site.robots"),
        (json.dumps({**good(), "metadata": {}}).encode(), "metadata"),
        (json.dumps({**good(), "surprise": 1}).encode(), "surprise"),
        (json.dumps({**good(), "attempt_count": -1}).encode(), "attempt_count"),
        (json.dumps({k: v for k, v in good().items() if k != "keywords_used"}).encode(), "keywords_used"),
    ],
)
def test_bad_messages_raise_message_error(body: bytes, match: str) -> None:
    with pytest.raises(MessageError, match=match):
        decode_job(body)


def test_the_sender_refuses_invalid_messages_too() -> None:
    with pytest.raises(ValueError, match="search_url"):
        make(search_url="javascript:alert(1)")
    with pytest.raises(MessageError):
        encode_job({"schema_version": 1})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frozen"):
        make().attempt_count = 3  # type: ignore[misc]


def test_the_documented_example_is_valid() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "job-message.md").read_text()
    example = doc.split("```json", 1)[1].split("```", 1)[0]
    message = decode_job(example.encode())
    assert message.idempotency_key == idempotency_key(message.target_id, message.slot_at)
    assert message.job_id == job_id_for(message.target_id, message.slot_at)


#: A body of the pre-release schema version 1 (an untyped ``metadata`` dict).
V1 = {
    "schema_version": 1,
    "job_id": job_id_for(42, SLOT),
    "idempotency_key": idempotency_key(42, SLOT),
    "target_id": 42,
    "slot_at": "2026-03-01T07:30:00Z",
    "website_id": 7,
    "website_name": "jobs-example",
    "search_url": "https://jobs.example.com/search?q=python&l=Berlin",
    "requires_playwright": True,
    "pagination_type": "page_param",
    "keywords_used": "python",
    "location_used": "Berlin",
    "attempt_count": 1,
    "metadata": {
        "base_url": "https://jobs.example.com",
        "pagination": {"param": "p", "start": 0, "step": 1, "max_pages": 3, "selector": None},
        "extraction": {"item_selector": "article", "fields": {"title": "h2"}},
        "politeness": {"min_delay": 2.0, "max_concurrency": 2, "robots": "ignore"},
        "site": {"country": "de", "revisit_age_seconds": 60},
    },
    "created_at": "2026-03-01T07:30:03Z",
}


def test_a_version_1_body_is_an_unknown_version() -> None:
    """Version 1 was never released: its bodies are refused like any unknown version (dead-lettered)."""
    for body in (V1, {**V1, "metadata": {}}):
        with pytest.raises(MessageError, match=r"unknown job message schema_version 1; this crawlherd understands 2$"):
            decode_job(json.dumps(body).encode())


def test_slot_bodies_follow_the_model_field_for_field() -> None:
    assert tuple(JobMessage.model_fields) == BODY_FIELDS


UNICODE_SITE = SiteSpec(
    name="jobs-unicode",
    base_url="https://jobs.example.com",
    search_url_template="https://jobs.example.com/s?q={keywords}&l={location}",
    extraction={"item_selector": "article", "fields": {"titel": "h2.überschrift"}},
    metadata={"land": "Österreich", "quote": 'a "b" \\ c', "emoji": "🦀", "ctl": "tab\there"},
)


@settings(max_examples=300, deadline=None)
@given(
    target_id=st.integers(min_value=-2, max_value=2**53),
    slot=st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.sampled_from([UTC, None])
    ),
    created=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)),
    keywords=st.text(),
    location=st.none() | st.text(),
    url=st.sampled_from(["https://jobs.example.com/s?q=1", " http://x/", "HTTPS://X/ä", "ftp://x/", "", "https://x/\n"])
    | st.text().map(lambda t: "https://jobs.example.com/" + t),
    site=st.sampled_from([SITE, UNICODE_SITE]),
)
def test_slot_bodies_encode_as_the_model_does(
    target_id: int, slot: datetime, created: datetime, keywords: str, location: str | None, url: str, site: SiteSpec
) -> None:
    """The tick's shortcut writes the very bytes the model writes, and refuses what the model refuses."""
    fields: dict[str, Any] = {
        "target_id": target_id, "slot_at": slot, "search_url": url, "keywords_used": keywords, "location_used": location
    }
    try:
        message = JobMessage.for_slot(created_at=created, website_id=7, site=site, **fields)
    except (ValueError, MessageError) as exc:  # pydantic's ValidationError is a ValueError
        with pytest.raises(type(exc)):
            SlotBodies(website_id=7, site=site, created_at=created).encode(**fields)
        return
    key, body = SlotBodies(website_id=7, site=site, created_at=created).encode(**fields)
    assert (key, body) == (message.idempotency_key, encode_job(message).decode())
    assert decode_job(body) == message


@pytest.mark.parametrize("key", ["1:2026-01-05T07:00:00Z", "987654321:2026-03-29T01:30:00.250000Z", "5:é"])
def test_job_ids_are_uuid5_of_the_idempotency_key(key: str) -> None:
    assert _job_uuid(key) == str(uuid.uuid5(_JOB_NAMESPACE, key))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_job_ids_are_uuid5_of_any_key(key: str) -> None:
    assert _job_uuid(key) == str(uuid.uuid5(_JOB_NAMESPACE, key))
