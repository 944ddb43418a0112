"""Copy-paste blocks of the docs, for the tests that run them.

A block is a fenced code block right after an HTML comment ``<!-- block: NAME -->``; :func:`doc_block`
returns its text, so the setups in docs/integrations.md are the ones the tests run.
"""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def doc_block(name: str, page: str = "integrations.md") -> str:
    """The text of block ``name`` in ``docs/<page>``; fails the test when it is missing."""
    text = (DOCS / page).read_text(encoding="utf-8")
    m = re.search(rf"<!-- block: {re.escape(name)} -->\s*\n```[^\n]*\n(.*?)^```", text, re.S | re.M)
    assert m is not None, f"docs/{page} has no block {name!r}"
    return m.group(1)
