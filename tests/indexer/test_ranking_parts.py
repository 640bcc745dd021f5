"""The pieces of ranking: tokenizer, BM25, reciprocal rank fusion and patternWeights."""

from __future__ import annotations

import numpy as np
import pytest

from autarch.contracts.indexer import IndexerErrorCode
from autarch.services.indexer.errors import IndexerError
from autarch.services.indexer.file_ranking import files_in_order, fuse_files, is_test_path
from autarch.services.indexer.fusion import reciprocal_rank_fusion
from autarch.services.indexer.lexical import bm25_scores, query_terms, tokenize
from autarch.services.indexer.pattern_weights import parse_pattern_weights, weight_for


def test_tokenizer_splits_identifiers_and_folds_inflections() -> None:
    terms = tokenize("def parseHTTPResponse(raw_bytes): # parsing responses")
    assert {"parsehttprespons", "pars", "http", "respons", "raw", "byte"} <= set(terms)
    assert "def" not in terms
    assert query_terms("How are responses parsed? parsed!") == ["respons", "pars"]


def test_bm25_prefers_rare_terms_and_respects_scope() -> None:
    lengths = np.array([10, 10, 10], dtype=np.float32)
    common = (np.array([0, 1, 2]), np.array([1, 1, 1]))
    rare = (np.array([1]), np.array([2]))
    scores = bm25_scores([common, rare], lengths=lengths, in_scope=np.array([True, True, True]))
    assert scores.argmax() == 1
    scoped = bm25_scores([common, rare], lengths=lengths, in_scope=np.array([True, False, True]))
    assert scoped[1] == 0 and scoped[0] > 0


def test_reciprocal_rank_fusion_rewards_agreement() -> None:
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "c", "a"]]))
    assert max(fused, key=fused.__getitem__) == "b"
    assert dict(reciprocal_rank_fusion([["x"], ["x"]]))["x"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "path",
    ["tests/test_app.py", "pkg/test/util.py", "src/__tests__/a.js", "spec/models/user_spec.rb", "x/conftest.py",
     "net/http_test.go", "ui/button.test.tsx", "ui/button.spec.js", "src/FooTest.java", "core/app_tests.py"],
)
def test_test_files_are_recognised(path: str) -> None:
    assert is_test_path(path)


@pytest.mark.parametrize(
    "path", ["falcon/testing/client.py", "src/contest.py", "attest/core.py", "latest.py", "docs/testing.md", "app.py"]
)
def test_code_that_only_mentions_test_is_not_a_test(path: str) -> None:
    assert not is_test_path(path)


def test_files_in_order_keeps_each_path_at_its_blob_first_position() -> None:
    paths_of = {"b1": ["a.py"], "b2": ["b.py", "copy/b.py"], "b3": ["c.py"]}
    assert files_in_order(["b2", "b1", "b2", "b9", "b3", "b1"], paths_of) == ["b.py", "copy/b.py", "a.py", "c.py"]


def test_file_fusion_rewards_agreement_and_puts_tests_after_the_code() -> None:
    rankings = [["web_test.py", "web.py", "util.py"], ["web.py", "web_test.py"], ["web.py", "util.py"]]
    scores = fuse_files(rankings, weights=[1, 1, 1], k=20, test_factor=1.0, asks_about_tests=False)
    assert max(scores, key=scores.__getitem__) == "web.py" and scores["web.py"] <= 1.0
    solo = fuse_files([["a.py"], ["a.py"]], weights=[1, 1], k=20, test_factor=0.6, asks_about_tests=False)
    assert solo["a.py"] == pytest.approx(1.0)
    # A test file first in every list still comes after the code, unless the question is about tests.
    first = [["test_web.py", "web.py"], ["test_web.py", "web.py"]]
    demoted = fuse_files(first, weights=[1, 1], k=20, test_factor=0.6, asks_about_tests=False)
    assert demoted["web.py"] > demoted["test_web.py"]
    asked = fuse_files(first, weights=[1, 1], k=20, test_factor=0.6, asks_about_tests=True)
    assert asked["test_web.py"] > asked["web.py"]


def test_pattern_weights_follow_the_spec() -> None:
    weights = parse_pattern_weights(["**/*.cs:1.5", "docs/**:0.1", "*.md:0", "tests/**:2", "src/*.py:3"])
    assert weight_for("src/deep/Example.cs", weights) == 1.5
    assert weight_for("Example.cs", weights) == 1.5
    assert weight_for("docs/a/b.txt", weights) == pytest.approx(0.1)
    assert weight_for("docs/readme.md", weights) == 0.0  # 0 excludes, whatever else matches
    assert weight_for("tests/test_x.py", weights) == 2.0
    assert weight_for("src/app.py", weights) == 3.0 and weight_for("src/sub/app.py", weights) == 1.0
    assert weight_for("other.py", weights) == 1.0
    assert parse_pattern_weights([]) == [] and parse_pattern_weights(None) == []


@pytest.mark.parametrize("entry", ["no-colon", ":1.5", "**/*.py:", "**/*.py:abc", "a:-1", "a:nan", "a:inf"])
def test_malformed_pattern_weights_are_typed_errors(entry: str) -> None:
    with pytest.raises(IndexerError) as error:
        parse_pattern_weights([entry])
    assert error.value.code == IndexerErrorCode.INVALID_PATTERN_WEIGHTS
    assert "patternWeights[0]" in error.value.message
