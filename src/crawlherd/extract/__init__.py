"""Turning fetched pages into items: declarative CSS rules (:mod:`.rules`), pagination
(:mod:`.pagination`) -- both built on CSS selectors (:mod:`.selectors`, the leaf) -- and Python
handlers by website name (:mod:`.handlers`)."""

from __future__ import annotations

from crawlherd.extract.handlers import (
    ENTRY_POINT_GROUP,
    Handler,
    HandlerRegistry,
    get_handler,
    register_handler,
    resolve_extractor,
    run_extractor,
)
from crawlherd.extract.pagination import (
    PAGINATION_TYPES,
    Pagination,
    get_query_param,
    increment_query_param,
    next_link_url,
    set_query_param,
)
from crawlherd.extract.rules import ExtractionResult, ExtractionRules, Page
from crawlherd.extract.selectors import FieldRule, check_selector, parse_html

__all__ = [
    "ENTRY_POINT_GROUP",
    "PAGINATION_TYPES",
    "ExtractionResult",
    "ExtractionRules",
    "FieldRule",
    "Handler",
    "HandlerRegistry",
    "Page",
    "Pagination",
    "check_selector",
    "get_handler",
    "get_query_param",
    "increment_query_param",
    "next_link_url",
    "parse_html",
    "register_handler",
    "resolve_extractor",
    "run_extractor",
    "set_query_param",
]
