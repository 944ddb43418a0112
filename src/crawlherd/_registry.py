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

__all__ = ["DRIVER_EXTRAS", "REDIS_SCHEMES", "open_backend", "redis_aliases", "resolve_backend", "scheme_of"]

#: The pip extra that brings a scheme's driver: the driver is the scheme's, whatever the plug-point.
DRIVER_EXTRAS: dict[str, str] = {
    "redis": "redis",
    "rediss": "redis",
    "amqp": "amqp",
    "amqps": "amqp",
    "sqs": "sqs",
    "celery": "celery",
    "postgresql": "postgresql",
    "postgres": "postgresql",
}
#: The spellings of a Redis URL: plain, TLS, and a Redis Cluster's nodes.
REDIS_SCHEMES = ("redis", "rediss", "redis+cluster")


def redis_aliases(target: str) -> dict[str, str]:
    """``target`` (a ``"module:Class"`` string) under every scheme of :data:`REDIS_SCHEMES`."""
    return dict.fromkeys(REDIS_SCHEMES, target)


def scheme_of(url: str) -> str:
    """The scheme of a backend URL, lower-cased (``postgresql+asyncpg`` -> ``postgresql``)."""
    scheme = urlsplit(url).scheme.lower()
    return scheme.split("+", 1)[0]


def resolve_backend(url: str, aliases: Mapping[str, str], kind: str) -> Any:
    """The class registered in ``aliases`` for ``url``'s scheme. ``kind`` names the plug-point in
    messages ("frontier", "broker"); a missing driver names its extra (:data:`DRIVER_EXTRAS`)."""
    scheme = scheme_of(url)
    target = aliases.get(scheme)
    if target is None:
        known = ", ".join(f"{s}://" for s in sorted(aliases))
        raise ConfigurationError(f"unknown {kind} URL scheme {scheme!r} in {redact_url(url)!r}; known schemes: {known}")
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        extra = DRIVER_EXTRAS.get(scheme)
        hint = f" (pip install 'crawlherd[{extra}]')" if extra else ""
        raise ConfigurationError(f"the {kind} backend for {scheme}:// needs the {exc.name!r} package{hint}") from exc
    return getattr(module, attr)


def open_backend(url: str, aliases: Mapping[str, str], kind: str, **options: Any) -> Any:
    """The backend for ``url``: its class (see :func:`resolve_backend`) built by ``from_url(url, **options)``.
    Query parameters of the URL are options too; keyword options win over them."""
    return resolve_backend(url, aliases, kind).from_url(url, **options)
