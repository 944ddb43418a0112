"""The fetch profile (issue 21): the docs' worked example is a valid targets-file website, bad values are
refused where they are declared, secrets are named not written, and the ban and lapse rules."""

from __future__ import annotations

import tomllib

import pytest
from pydantic import ValidationError

from crawlherd.errors import ConfigurationError
from crawlherd.fetchprofile import BanSpec, FetchProfile, LoginSpec, proxy_label, read_secret, with_secrets
from crawlherd.sitespec import SiteSpec
from tests.support.docblocks import doc_block


def test_the_docs_worked_example_is_a_valid_website() -> None:
    document = tomllib.loads(doc_block("fetch-profile", "fetch-profile.md"))
    site = SiteSpec.model_validate(document["websites"][0])
    profile = site.fetch
    assert len(profile.tiers) == 2 and profile.identities == 3 and profile.page_attempts == 6
    assert profile.ban.cool_off == 300 and profile.session.max_age == 1800
    assert profile.login is not None and profile.login.secrets["password"] == "file:jobs_password"
    assert profile.request_headers()["User-Agent"].startswith("Mozilla/5.0")
    plain = SiteSpec.model_validate({**document["websites"][0], "fetch": {}})
    assert profile.sessions_on and not plain.fetch.sessions_on


@pytest.mark.parametrize(
    ("fetch", "says"),
    [
        ({"proxies": ["ftp://p:1"]}, "scheme must be one of"),
        ({"proxies": ["socks5://host"]}, "needs a host (and a port for SOCKS)"),
        ({"proxies": [["http://a:1"], []]}, "a proxy tier is empty"),
        ({"proxies": ["http://a:1", "http://a:1"]}, "a proxy is listed twice"),
        ({"ban": {"markers": ["(unclosed"]}}, "is not a regular expression"),
        ({"login": {"url": "https://x/login", "secrets": {"password": "hunter2"}}}, "must be named, not written"),
        ({"login": {"url": "/login"}}, "must start with http"),
    ],
)
def test_mistakes_are_refused_where_declared(fetch: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError) as info:
        FetchProfile.model_validate(fetch)
    message = info.value.errors()[0]["msg"]  # what a targets file's problem list shows
    assert says in message and "hunter2" not in message


def test_proxy_credentials_are_redacted_in_messages_and_labels() -> None:
    with pytest.raises(ValidationError) as info:
        FetchProfile.model_validate({"proxies": ["ftp://u:s3cret@p:1"]})
    assert "s3cret" not in info.value.errors()[0]["msg"]
    assert proxy_label("http://u:s3cret@p:1") == "http://u:***@p:1"
    assert proxy_label(None) == "direct"


def test_secrets_are_read_by_name(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("BOARD_PW", "pw-1")
    (tmp_path / "proxy_pw").write_text("pw-2\n")
    monkeypatch.setenv("CRAWLHERD_SECRETS_DIR", str(tmp_path))
    assert read_secret("env:BOARD_PW") == "pw-1" and read_secret("file:proxy_pw") == "pw-2"
    assert with_secrets("http://u:{file:proxy_pw}@h:1") == "http://u:pw-2@h:1"
    assert with_secrets("no secret") == "no secret"
    with pytest.raises(ConfigurationError, match="NOPE is not set") as info:
        read_secret("env:NOPE")
    login = LoginSpec(url="https://x/l", form={"a": "1"}, secrets={"p": "env:BOARD_PW"})
    assert login.payload() == {"a": "1", "p": "pw-1"}
    assert "pw" not in str(info.value).replace("NOPE", "")


def test_ban_rules() -> None:
    ban = BanSpec(markers=["(?i)captcha"], block_urls=["/blocked"])
    assert ban.blocked(403, {}, "https://x/a", None) == "HTTP 403"
    assert ban.blocked(429, {"retry-after": "5"}, "https://x/a", None) is None  # politeness, not a ban
    assert ban.blocked(429, {}, "https://x/a", None) == "HTTP 429"
    assert ban.blocked(200, {}, "https://x/blocked?from=a", "") is not None
    assert ban.blocked(200, {}, "https://x/a", "<p>Solve the CAPTCHA</p>") is not None
    assert ban.blocked(200, {}, "https://x/a", "<p>jobs</p>") is None


def test_login_lapse_and_success() -> None:
    login = LoginSpec(url="https://x/login", success_marker="Welcome", lapse_marker="sign in")
    assert login.lapsed(200, "https://x/login", ("https://x/search",), "")
    assert login.lapsed(401, "https://x/a", (), "")
    assert login.lapsed(200, "https://x/a", (), "please sign in")
    assert not login.lapsed(200, "https://x/a", (), "jobs")
    assert login.succeeded(200, "https://x/account", "Welcome back")
    assert not login.succeeded(200, "https://x/login", "Welcome")
    assert not login.succeeded(200, "https://x/account", "who?")
