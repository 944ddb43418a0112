"""crawl4ai's PruningContentFilter and DefaultMarkdownGenerator on crawlherd."""

from __future__ import annotations

import pytest

from crawlherd.compat.crawl4ai import DefaultMarkdownGenerator, PruningContentFilter
from crawlherd.errors import ConfigurationError

PAGE = """<html><body>
<nav class="menu"><a href="/a">A</a> <a href="/b">B</a> <a href="/c">C</a></nav>
<div class="pager"><a href="/prev">Prev</a> <a href="/next">Next</a></div>
<article><h1>The story</h1><p>A long paragraph of real prose that a reader came for, with enough words in it
to count as content rather than chrome, and a <a href="/ref">reference</a> in the middle.</p>
<p class="keep">Short.</p></article>
<!-- a comment --><script>var x = 1;</script><footer>Footer text</footer>
</body></html>"""


def test_pruning_keeps_the_prose_and_drops_the_chrome() -> None:
    kept = "".join(PruningContentFilter(threshold=0.48).filter_content(PAGE))
    assert "real prose" in kept and "The story" in kept
    for gone in ("Footer text", "var x", "a comment", 'href="/a"', "Prev"):
        assert gone not in kept


def test_pruning_options() -> None:
    strict = "".join(PruningContentFilter(threshold=0.48, min_word_threshold=3).filter_content(PAGE))
    assert "Short." not in strict and "real prose" in strict
    preserved = "".join(PruningContentFilter(threshold=0.48, min_word_threshold=3, preserve_classes=["keep"])
                        .filter_content(PAGE))
    assert "Short." in preserved
    dynamic = "".join(PruningContentFilter(threshold=0.48, threshold_type="dynamic").filter_content(PAGE))
    assert "real prose" in dynamic and "Prev" not in dynamic
    assert PruningContentFilter().filter_content("") == []
    with pytest.raises(ConfigurationError, match="user_query"):
        PruningContentFilter(user_query="story")
    with pytest.raises(ConfigurationError, match="threshold_type"):
        PruningContentFilter(threshold_type="adaptive")


def test_markdown_with_citations_and_fit() -> None:
    generator = DefaultMarkdownGenerator(content_filter=PruningContentFilter())
    result = generator.generate_markdown(PAGE, base_url="https://example.com/story")
    assert "# The story" in result.raw_markdown and "var x" not in result.raw_markdown
    assert result == result.raw_markdown
    assert "[reference](https://example.com/ref)" in result.raw_markdown
    assert "reference⟨" in result.markdown_with_citations and "](" not in result.markdown_with_citations
    assert "https://example.com/ref: reference" in result.references_markdown
    assert "real prose" in result.fit_markdown and "Footer" not in result.fit_markdown
    assert "<div>" in result.fit_html
    plain = DefaultMarkdownGenerator().generate_markdown(PAGE, citations=False)
    assert plain.fit_markdown == "" and plain.references_markdown == ""
    with pytest.raises(ConfigurationError, match="html2text"):
        DefaultMarkdownGenerator(options={"ignore_links": True})
