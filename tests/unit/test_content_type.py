"""The one Content-Type parser both fetchers use: media type, charset, unknown charsets."""

from __future__ import annotations

import pytest

from crawlherd.content_type import charset_of, decode_body, media_type
from crawlherd.errors import ContentTypeError
from crawlherd.fetch.base import FetchLimits, Response
from crawlherd.request import Request
from crawlherd.result import CrawlResult


@pytest.mark.parametrize(
    ("header", "mime", "charset"),
    [
        ("", "", "utf-8"),
        ("text/html", "text/html", "utf-8"),
        (" Text/HTML ; charset=ISO-8859-1", "text/html", "iso-8859-1"),
        ('text/html; Charset="windows-1252"', "text/html", "windows-1252"),
        ("text/html; charset='koi8-r'; boundary=x", "text/html", "koi8-r"),
        ("text/html; format=flowed; charset=shift_jis", "text/html", "shift_jis"),
        ("text/html; xcharset=latin-1", "text/html", "utf-8"),  # another parameter, not charset
        ("text/html; charset=", "text/html", "utf-8"),
        ("text/html; charset=bogus", "text/html", "utf-8"),  # unknown: utf-8, never LookupError
        ("application/json;charset=UTF-8", "application/json", "utf-8"),
    ],
)
def test_media_type_and_charset(header: str, mime: str, charset: str) -> None:
    assert media_type(header) == mime
    assert charset_of(header) == charset


def test_unknown_charset_decodes_as_utf8_with_replacement() -> None:
    body = "café ".encode() + b"\xff"
    assert decode_body(body, "bogus") == "café \ufffd"
    assert decode_body("café".encode("latin-1"), "ISO-8859-1") == "café"


def test_response_and_result_share_text_and_content_type() -> None:
    headers = {"content-type": "Text/Plain; charset=bogus"}
    response = Response(url="http://a.example/", status=200, headers=headers, body=b"ok \xff",
                        request=Request("http://a.example/"), encoding="bogus")
    result = CrawlResult(url="http://a.example/", success=True, headers=headers, body=b"ok \xff", encoding="bogus")
    assert response.text == result.text == "ok \ufffd"
    assert response.content_type == result.content_type == "text/plain"


def test_content_type_allow_list() -> None:
    limits = FetchLimits(allowed_content_types=("text/html",))
    limits.check_content_type("text/html; charset=utf-8", url="http://a.example/")
    limits.check_content_type("", url="http://a.example/")  # nothing declared passes
    with pytest.raises(ContentTypeError, match="'image/png' is not allowed"):
        limits.check_content_type("image/png", url="http://a.example/")
    FetchLimits(allowed_content_types=()).check_content_type("image/png", url="http://a.example/")
