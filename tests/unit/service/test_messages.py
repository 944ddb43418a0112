"""The job message schema v1: valid messages round-trip; bad ones raise MessageError, never crash."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from crawlherd.errors import MessageError
from crawlherd.messages import JobMessage, decode_job, encode_job, idempotency_key, job_id_for

SLOT = datetime(2026, 3, 1, 7, 30, tzinfo=UTC)


def make(**overrides: Any) -> JobMessage:
    fields: dict[str, Any] = {
        "target_id": 42,
        "slot_at": SLOT,
        "created_at": SLOT + timedelta(seconds=3),
        "website_id": 7,
        "website_name": "jobs-example",
        "search_url": "https://jobs.example.com/search?q=python&l=Berlin",
        "requires_playwright": True,
        "pagination_type": "page_param",
        "keywords_used": "python",
        "location_used": "Berlin",
        "metadata": {"extraction": {"item": "article"}, "politeness": {"min_delay": 2.0}},
    }
    fields.update(overrides)
    return JobMessage.for_slot(**fields)


def test_round_trip_and_wire_form() -> None:
    message = make()
    body = encode_job(message)
    data = json.loads(body)
    assert data["schema_version"] == 1
    assert data["idempotency_key"] == "42:2026-03-01T07:30:00Z" == idempotency_key(42, SLOT)
    assert data["slot_at"] == "2026-03-01T07:30:00Z"
    assert data["attempt_count"] == 0
    assert decode_job(body) == message


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
        (b"\xff\xfe", "not valid JSON"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b"{}", "no schema_version"),
        (json.dumps({**good(), "schema_version": 2}).encode(), "unknown job message schema_version 2"),
        (json.dumps({**good(), "schema_version": "1"}).encode(), "unknown job message schema_version"),
        (json.dumps({**good(), "schema_version": True}).encode(), "unknown job message schema_version"),
        (json.dumps({**good(), "target_id": 0}).encode(), "target_id"),
        (json.dumps({**good(), "search_url": "file:///etc/passwd"}).encode(), "search_url"),
        (json.dumps({**good(), "slot_at": "2026-03-01T07:30:00"}).encode(), "slot_at"),
        (json.dumps({**good(), "idempotency_key": "42:yesterday"}).encode(), "does not match"),
        (json.dumps({**good(), "pagination_type": "infinite"}).encode(), "pagination_type"),
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
