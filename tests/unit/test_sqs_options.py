"""The sqs:// URL and its options are checked when the broker is made (no server needed)."""

from __future__ import annotations

import pytest

from crawlherd.brokers import open_broker
from crawlherd.errors import ConfigurationError

pytest.importorskip("aiobotocore")


def test_url_names_the_queue_and_its_kind() -> None:
    standard = open_broker("sqs://Jobs_Queue-1?region=eu-west-1")
    fifo = open_broker("sqs://KEY:SECRET@jobs.fifo?region=eu-west-1&visibility_timeout=60")
    assert (standard.queue, standard.dead_queue, standard.fifo) == ("Jobs_Queue-1", "Jobs_Queue-1-dead", False)  # type: ignore[attr-defined]
    assert (fifo.queue, fifo.dead_queue, fifo.fifo) == ("jobs.fifo", "jobs-dead.fifo", True)  # type: ignore[attr-defined]
    assert fifo.options.visibility_timeout == 60  # type: ignore[attr-defined]
    assert "SECRET" not in repr(fifo)


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("sqs://", "names no queue"),
        ("sqs://bad!name", "not a valid SQS queue name"),
        ("sqs://jobs.fifo?dead_queue=dead", "same kind"),
        ("sqs://jobs?message_group=g", "FIFO"),
        ("sqs://jobs?wait_time=21", "wait_time"),
        ("sqs://jobs?visibility_timeout=0", "visibility_timeout"),
        ("sqs://jobs?heartbeat=40", "heartbeat"),
        ("sqs://jobs?nope=1", "unknown sqs broker option 'nope'"),
        ("sqs://KEY@jobs", "both the access key id and the secret"),
    ],
)
def test_bad_urls_are_refused_with_a_message(url: str, match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        open_broker(url)
