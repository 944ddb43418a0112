"""The configuration reference names every setting and its environment variable."""

from __future__ import annotations

from pathlib import Path

from crawlherd.settings import ENV_PREFIX, Settings

DOC = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_every_setting_is_documented_with_its_variable() -> None:
    missing = [
        name for name in Settings.model_fields if f"`{name}`" not in DOC or f"`{ENV_PREFIX}{name.upper()}`" not in DOC
    ]
    assert not missing, f"docs/configuration.md does not document: {missing}"
