"""Run the real ``crawlherd`` CLI in a subprocess with the test-double brokers registered
(``testdb+...`` URLs). Used by the multi-process dispatcher tests."""

from __future__ import annotations

import sys

from crawlherd.brokers import BROKER_ALIASES
from crawlherd.cli import main

BROKER_ALIASES["testdb"] = "tests.support.table_broker:TableBrokerDouble"
BROKER_ALIASES["die"] = "tests.support.real_brokers:DieAfterPublish"

if __name__ == "__main__":
    sys.exit(main())
