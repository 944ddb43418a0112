"""Search-URL templates: ``https://site/search?q={keywords}&l={location}``."""

from __future__ import annotations

import string
from urllib.parse import quote_plus

__all__ = ["PLACEHOLDERS", "render_search_url", "template_problems"]

PLACEHOLDERS = frozenset({"keywords", "location"})


def template_problems(template: str) -> list[str]:
    """What is wrong with ``template`` (empty when it can be used)."""
    problems: list[str] = []
    try:
        fields = [name for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return [f"cannot parse the template: {exc} (write a literal brace as '{{{{' or '}}}}')"]
    for name in fields:
        if name not in PLACEHOLDERS:
            problems.append(f"unknown placeholder {{{name}}}; use {{keywords}} and {{location}}")
    if not template.lower().startswith(("http://", "https://")):
        problems.append("must start with http:// or https://")
    return problems


def render_search_url(template: str, *, keywords: str, location: str | None) -> str:
    """The template with ``{keywords}`` and ``{location}`` filled in, URL-encoded."""
    return template.format(keywords=quote_plus(keywords), location=quote_plus(location or ""))
