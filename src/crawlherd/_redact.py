"""Secrets in URLs never reach a log line or a repr."""

from __future__ import annotations

import re

__all__ = ["redact_url"]

_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@]*):(?P<pw>[^@/]*)@")
_SECRET_PARAMS = re.compile(r"(?i)([?&](?:password|passwd|pwd|token|secret|api_key|apikey)=)[^&]*")


def redact_url(url: str) -> str:
    """``amqp://guest:secret@host/`` -> ``amqp://guest:***@host/``; secret query values too."""
    url = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
    return _SECRET_PARAMS.sub(r"\1***", url)
