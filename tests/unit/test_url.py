"""URL canonicalisation and fingerprints: explicit cases and properties."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawlherd import Request, canonicalize_url
from crawlherd.errors import InvalidURLError
from crawlherd.request import FINGERPRINT_SIZE, fingerprint
from crawlherd.url import host_of


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("HTTP://Example.COM/Path", "http://example.com/Path"),  # scheme, host lower; path case kept
        ("http://example.com:80/a", "http://example.com/a"),  # default port dropped
        ("https://example.com:443/a", "https://example.com/a"),
        ("https://example.com:8443/a", "https://example.com:8443/a"),  # other port kept
        ("http://example.com", "http://example.com/"),  # empty path
        ("http://example.com/a?b=2&a=1&a=0", "http://example.com/a?a=0&a=1&b=2"),  # query sorted
        ("http://example.com/a#section", "http://example.com/a"),  # fragment dropped
        ("http://example.com/a?#x", "http://example.com/a"),
        ("http://example.com/a b", "http://example.com/a%20b"),  # unsafe characters quoted
        ("http://example.com/%7Euser", "http://example.com/%7Euser"),  # escapes kept
        ("http://bücher.de/", "http://xn--bcher-kva.de/"),  # IDNA
        ("http://[::1]:8080/x", "http://[::1]:8080/x"),
        ("http://127.0.0.1:80/", "http://127.0.0.1/"),
        ("  http://example.com/  ", "http://example.com/"),
        ("http://example.com./a", "http://example.com/a"),
        ("http://user:pw@example.com/a", "http://user:pw@example.com/a"),
        ("http://example.com/a?x=&y", "http://example.com/a?x=&y"),  # blank values kept
    ],
)
def test_canonical_forms(raw: str, canonical: str) -> None:
    assert canonicalize_url(raw) == canonical


def test_tracking_parameters_dropped_only_when_asked() -> None:
    url = "http://example.com/?utm_source=x&id=3&gclid=abc"
    assert canonicalize_url(url) == "http://example.com/?gclid=abc&id=3&utm_source=x"
    assert canonicalize_url(url, strip_tracking=True) == "http://example.com/?id=3"
    assert canonicalize_url(url, strip_tracking=frozenset({"id"})) == "http://example.com/?gclid=abc"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("example.com/path", "no scheme"),
        ("ftp://example.com/", "not supported"),
        ("javascript:alert(1)", "not supported"),
        ("http:///path", "no host"),
        ("http://exa mple.com/", "not a valid host"),
        ("http://-bad-.com/", "not a valid host"),
        ("http://example.com:99999/", "malformed"),
        ("http://example.com:abc/", "malformed"),
        ("http://example.com:0/", "port 0"),
        ("http://example.com/\x00x", "control characters"),
        ("http://exa\nmple.com/", "control characters"),
        ("", "empty"),
        ("http://[::1/", "malformed"),
    ],
)
def test_bad_urls_raise_a_named_problem(raw: str, problem: str) -> None:
    with pytest.raises(InvalidURLError, match=problem):
        Request(raw)


def test_invalid_url_error_is_a_value_error_with_the_url() -> None:
    with pytest.raises(ValueError, match="scheme") as info:
        Request("nope")
    assert isinstance(info.value, InvalidURLError)
    assert info.value.url == "nope"


def test_bad_method_is_refused() -> None:
    with pytest.raises(InvalidURLError, match="method"):
        Request("http://example.com/", method="FETCH")
    assert Request("http://example.com/", method="post").method == "POST"


def test_fingerprint_is_fixed_size_and_distinguishes_method_and_body() -> None:
    get = Request("http://example.com/a")
    post = Request("http://example.com/a", method="POST")
    post_body = Request("http://example.com/a", method="POST", body=b"x=1")
    fps = {get.fingerprint, post.fingerprint, post_body.fingerprint}
    assert len(fps) == 3
    assert all(len(fp) == FINGERPRINT_SIZE for fp in fps)
    assert Request("http://EXAMPLE.com:80/a#f").fingerprint == get.fingerprint


def test_dedup_key_makes_a_revisit_a_new_request() -> None:
    plain = Request("http://example.com/job/1")
    period_1 = Request("http://example.com/job/1", dedup_key="p1")
    period_2 = Request("http://example.com/job/1", dedup_key="p2")
    assert len({plain.fingerprint, period_1.fingerprint, period_2.fingerprint}) == 3
    assert Request("http://EXAMPLE.com/job/1#x", dedup_key="p1").fingerprint == period_1.fingerprint
    assert Request.from_record(period_1.to_record()).fingerprint == period_1.fingerprint
    assert period_1.replace(priority=3).fingerprint == period_1.fingerprint


def test_host_of() -> None:
    assert host_of("http://example.com/a") == "example.com"
    assert host_of("http://example.com:8080?x=1") == "example.com:8080"
    assert host_of("http://u:p@example.com/") == "example.com"
    assert Request("http://[::1]:81/").host == "[::1]:81"


def test_record_round_trip_and_refusal_of_foreign_records() -> None:
    req = Request("http://example.com/a?b=1", method="PUT", priority=4, depth=2, meta={"a": [1]}, body="é")
    back = Request.from_record(req.to_record())
    assert back.fingerprint == req.fingerprint
    assert (back.priority, back.depth, back.meta, back.body) == (4, 2, {"a": [1]}, "é".encode())
    with pytest.raises(ValueError, match="version"):
        Request.from_record({"v": 99, "url": "http://x/"})
    with pytest.raises(ValueError, match="version"):
        Request.from_record(["not", "a", "dict"])  # type: ignore[arg-type]


def _attributes(req: Request) -> tuple[object, ...]:
    return (req.url, req.host, req.method, req.priority, req.depth, req.meta, req.headers, req.body, req.not_before,
            req.dedup_key, req.fingerprint)


@pytest.mark.parametrize("req", [
    Request("http://Example.com/a?b=1#frag", method="PUT", priority=4, depth=2, meta={"a": [1]}, body="é",
            headers={"X-A": "1"}, not_before=5.5, dedup_key="k"),
    Request("https://example.com:8443/%7Ex/ü"),
    Request("http://[::1]:81/p", method="HEAD"),
], ids=["every-field", "escapes", "ipv6"])
def test_a_record_with_its_fingerprint_is_read_back_without_parsing_the_url(req: Request) -> None:
    rec = json.loads(json.dumps(req.to_record(fingerprint=True)))
    assert rec["fp"] == req.fingerprint.hex()
    fast = Request.from_record(rec, host=req.host)  # as a frontier reads its own records
    assert _attributes(fast) == _attributes(req) == _attributes(Request.from_record(rec))
    assert _attributes(Request.from_record(req.to_record(), host=req.host)) == _attributes(req)  # no fp: parsed


def test_a_stored_record_with_a_broken_fingerprint_or_url_is_refused() -> None:
    rec = Request("http://example.com/a").to_record(fingerprint=True)
    with pytest.raises(ValueError, match="non-hexadecimal"):
        Request.from_record({**rec, "fp": "zz" * 8}, host="example.com")
    with pytest.raises(ValueError, match="not a stored request"):
        Request.from_record({**rec, "url": "ftp://example.com/a"}, host="example.com")
    with pytest.raises(InvalidURLError):  # not a string: parsed, and refused as any bad URL is
        Request.from_record({**rec, "url": 5}, host="example.com")


def test_replace_validates_the_new_url() -> None:
    req = Request("http://example.com/", priority=3)
    assert req.replace(priority=5).priority == 5
    assert req.replace(url="http://other.com/").host == "other.com"
    with pytest.raises(InvalidURLError):
        req.replace(url="mailto:x@y")


# --- properties ----------------------------------------------------------------------------------

_label = st.from_regex(r"[a-zA-Z0-9]([a-zA-Z0-9-]{0,8}[a-zA-Z0-9])?", fullmatch=True)
_host = st.lists(_label, min_size=1, max_size=3).map(".".join)
_seg = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cc", "Cs")), max_size=8)
_path = st.lists(_seg, max_size=4).map(lambda parts: "/" + "/".join(parts))
_param = st.tuples(st.from_regex(r"[a-z]{1,4}", fullmatch=True), st.text("abc123 %+", max_size=4))
_query = st.lists(_param, max_size=4).map(lambda ps: "&".join(f"{k}={v}" for k, v in ps))
_port = st.sampled_from(["", ":80", ":443", ":8080"])


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTP"]))
    query = draw(_query)
    frag = draw(st.sampled_from(["", "#top", "#x=1"]))
    return f"{scheme}://{draw(_host)}{draw(_port)}{draw(_path)}{'?' + query if query else ''}{frag}"


@settings(max_examples=300, deadline=None)
@given(urls())
def test_canonicalisation_is_idempotent(url: str) -> None:
    once = canonicalize_url(url)
    assert canonicalize_url(once) == once


@settings(max_examples=300, deadline=None)
@given(urls(), urls())
def test_equal_canonical_urls_iff_equal_fingerprints(a: str, b: str) -> None:
    ca, cb = canonicalize_url(a), canonicalize_url(b)
    assert (ca == cb) == (fingerprint("GET", ca) == fingerprint("GET", cb))
    assert (ca == cb) == (Request(a).fingerprint == Request(b).fingerprint)


@settings(max_examples=200, deadline=None)
@given(urls())
def test_variants_of_one_url_share_a_fingerprint(url: str) -> None:
    # Upper-casing the host, adding the fragment or the default port must not make a new page.
    req = Request(url)
    scheme, rest = req.canonical_url.split("://", 1)
    host, _, tail = rest.partition("/")
    variant = f"{scheme.upper()}://{host.upper()}/{tail}#frag"
    assert Request(variant).fingerprint == req.fingerprint


@settings(max_examples=500, deadline=None)
@given(urls())
def test_fast_path_agrees_with_the_general_path(url: str) -> None:
    from crawlherd.url import _canonicalize_general, canonicalize

    assert canonicalize(url) == _canonicalize_general(url, False)


@settings(max_examples=500, deadline=None)
@given(urls())
def test_a_request_url_handed_to_aiohttp_unquoted_is_sent_as_quoting_it_would(url: str) -> None:
    # HttpFetcher gives aiohttp a request's (canonical) URL as already encoded, where re-quoting it
    # would change nothing: the same request line and Host either way.
    from yarl import URL

    from crawlherd.fetch.http import _sendable

    canonical = Request(url).url
    quoted, sent = URL(canonical), URL(_sendable(canonical))
    assert (str(sent), sent.raw_path_qs, sent.raw_host, sent.port) == (
        str(quoted), quoted.raw_path_qs, quoted.raw_host, quoted.port)
    for odd in ("/a/./b/../c", "/%7euser/%2f"):  # escapes and dot segments: left to aiohttp's quoting
        assert _sendable(f"http://h.test{odd}") == f"http://h.test{odd}"
