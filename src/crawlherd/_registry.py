"""Backends chosen by URL: a table of lazy ``"module:Class"`` strings keyed by scheme.

An optional driver is imported only when its scheme is used; a missing one says which extra to install.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from crawlherd._redact import redact_url
from crawlherd.errors import ConfigurationError

__all__ = ["open_backend", "resolve_backend", "scheme_of"]


def scheme_of(url: str) -> str:
    """The scheme of a backend URL, lower-cased (``postgresql+asyncpg`` -> ``postgresql``)."""
    scheme = urlsplit(url).scheme.lower()
    return scheme.split("+", 1)[0]


def resolve_backend(url: str, aliases: Mapping[str, str], kind: str, extras: Mapping[str, str]) -> Any:
    """The class registered in ``aliases`` for ``url``'s scheme.

    ``kind`` names the plug-point in messages ("frontier", "broker"); ``extras`` maps a scheme to the
    pip extra that brings its driver.
    """
    scheme = scheme_of(url)
    target = aliases.get(scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in sorted(aliases))
        raise ConfigurationError(f"unknown {kind} URL scheme {scheme!r} in {redact_url(url)!r}; known schemes: {known}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        extra = extras.get(scheme)
        hint = f" (pip install 'crawlherd[{extra}]')" if extra else ""
        raise ConfigurationError(f"the {kind} backend for {scheme}:// needs the {exc.name!r} package{hint}") from exc
    return getattr(module, attr)


def open_backend(url: str, aliases: Mapping[str, str], kind: str, extras: Mapping[str, str], **options: Any) -> Any:
    """The backend for ``url``: its class (see :func:`resolve_backend`) built by ``from_url(url, **options)``.
    Query parameters of the URL are options too; keyword options win over them."""
    return resolve_backend(url, aliases, kind, extras).from_url(url, **options)
