"""The indexer in-process on real git repositories with the real model: index, re-index, search, errors."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from autarch.contracts.errors import ErrorCode
from autarch.contracts.indexer import NOT_INDEXED_MESSAGE, PROJECT_SCOPE, IndexerErrorCode, SemanticSearch
from autarch.services.indexer.engine import Indexer
from autarch.services.indexer.errors import IndexerError
from autarch.services.indexer.repository import blob_id

from .conftest import git, make_repo, write_files


def _files(indexer: Indexer, **kwargs) -> list[str]:
    return [r.file_path for r in indexer.search(SemanticSearch(**kwargs)).results]


def test_index_and_search_a_project(indexer: Indexer, repo: Path) -> None:
    write_files(repo, {"build/generated.py": "def verify_password():\n    pass\n", "debug.log": "password\n"})
    events: list[Any] = []
    result = indexer.index_project(str(repo / "app"), progress=events.append)  # any path inside the repo
    assert result.root == str(repo) and result.scope == PROJECT_SCOPE and result.state == "ready"
    assert result.files == 6 and result.chunks >= 8 and result.embedded_chunks == result.chunks
    phases = [e.phase for e in events]
    assert phases[0] == "scanning" and "embedding" in phases and phases[-1] == "done"
    found = indexer.search(SemanticSearch(query="compare password hashes in constant time", root=str(repo)))
    assert found.results[0].file_path == "app/auth.py"
    top = found.results[0]
    assert 0 < top.score <= 1 and top.adjusted_score == top.score
    lines = (repo / top.file_path).read_text().splitlines()
    assert top.snippet.splitlines()[0] == lines[top.start_line - 1]
    paths = {r.file_path for r in found.results}
    assert "build/generated.py" not in paths and "debug.log" not in paths  # .gitignore honoured
    assert _files(indexer, query="persist orders in the database", project=result.project)[0] == "app/storage.py"
    assert _files(indexer, query="dispatch a request to its route handler", root=str(repo))[0] == "web/router.js"
    status = indexer.status(root=str(repo))
    assert status.project == result.project and [s.state for s in status.scopes] == ["ready"]


def test_search_ranks_files_the_code_before_its_tests(indexer: Indexer, repo: Path) -> None:
    indexer.index_project(str(repo))
    results = indexer.search(SemanticSearch(query="verify_password hash comparison", root=str(repo))).results
    paths = [r.file_path for r in results]
    assert paths[0] == "app/auth.py" and "tests/test_auth.py" in paths
    assert paths.index("app/auth.py") < paths.index("tests/test_auth.py")
    # One chunk per file first: app/auth.py has three chunks, the others follow its first.
    distinct = len(set(paths))
    assert len(set(paths[:distinct])) == distinct
    assert all(r.score >= later.score for r, later in pairwise(results[:distinct]))
    # Asked about tests, the test file is not held back.
    about_tests = _files(indexer, query="tests of verify_password", root=str(repo))
    assert about_tests[0] == "tests/test_auth.py"


def test_pattern_weights_boost_penalize_and_exclude(indexer: Indexer, repo: Path) -> None:
    indexer.index_project(str(repo))
    query = "compare password hashes in constant time"
    plain = indexer.search(SemanticSearch(query=query, root=str(repo))).results
    assert plain[0].file_path == "app/auth.py"
    boosted = indexer.search(SemanticSearch(query=query, root=str(repo), pattern_weights=["tests/**:10"])).results
    assert boosted[0].file_path == "tests/test_auth.py"
    assert boosted[0].adjusted_score == pytest.approx(boosted[0].score * 10, rel=1e-3)
    excluded = _files(indexer, query=query, root=str(repo), pattern_weights=["app/**:0", "*.md:0"])
    assert excluded and not any(p.startswith("app/") or p.endswith(".md") for p in excluded)
    penalized = indexer.search(SemanticSearch(query=query, root=str(repo), pattern_weights=["**/*.py:0.1"])).results
    assert all(r.adjusted_score <= r.score for r in penalized)
    assert len(indexer.search(SemanticSearch(query=query, root=str(repo), max_results=2)).results) == 2


def test_worktree_reembeds_only_changed_files(indexer: Indexer, repo: Path, tmp_path: Path) -> None:
    project = indexer.index_project(str(repo))
    worktree = tmp_path / "pulse-1"
    git(repo, "worktree", "add", "-q", "-b", "pulse-1", str(worktree))
    write_files(
        worktree,
        {"app/billing.py": 'def charge_credit_card(amount):\n    """Charge the card."""\n    return amount\n'},
    )
    (worktree / "app" / "storage.py").write_text(
        (worktree / "app" / "storage.py").read_text() + "\n\ndef delete_order(db, order_id):\n    pass\n"
    )
    result = indexer.index_worktree(project.project, str(worktree), base="main")
    assert result.scope.startswith("wt-") and result.files == 7
    changed_chunks = result.embedded_chunks
    # billing.py's one chunk and storage.py's new function: the file's unchanged chunks reuse their vectors.
    assert changed_chunks == 2 and result.chunks == 15
    in_worktree = _files(indexer, query="charge the customer's credit card", root=str(worktree))
    assert in_worktree[0] == "app/billing.py"
    in_project = _files(indexer, query="charge the customer's credit card", root=str(repo))
    assert "app/billing.py" not in in_project
    again = indexer.index_worktree(project.project, str(worktree))
    assert again.embedded_chunks == 0  # nothing changed since
    statuses = {s.kind: s for s in indexer.status(project=project.project).scopes}
    assert statuses["worktree"].base == "main" and statuses["worktree"].root == str(worktree)

    # Seed 000: the pulse's searches see its working copy, without anyone asking for a re-index.
    write_files(worktree, {"app/shipping.py": "def estimate_parcel_delivery_days(zone):\n    return 3\n"})
    assert _files(indexer, query="estimate parcel delivery days", root=str(worktree))[0] == "app/shipping.py"
    assert indexer.status(root=str(worktree)).scopes[0].files == 8

    # A removed worktree's scope (and the blobs only it used) go at the project's next index.
    git(repo, "worktree", "remove", "--force", str(worktree))
    indexer.index_project(str(repo))
    assert [s.kind for s in indexer.status(project=project.project).scopes] == ["project"]
    shipping = blob_id(b"def estimate_parcel_delivery_days(zone):\n    return 3\n")
    assert indexer.store.known_blobs(project.project, [shipping]) == {}


def test_index_a_commit_and_honour_its_autarchignore(indexer: Indexer, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"old.py": "def legacy_payment_flow():\n    return 1\n"})
    first = git(repo, "rev-parse", "HEAD")
    (repo / "old.py").unlink()
    write_files(repo, {"new.py": "def modern_checkout():\n    return 2\n", ".autarchignore": "secret/\n"})
    write_files(repo, {"secret/keys.py": "def private_thing():\n    return 3\n"})
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")
    at_first = indexer.index_project(str(repo), commit=first[:8])
    assert at_first.files == 1
    assert _files(indexer, query="legacy payment flow", root=str(repo)) == ["old.py"]
    head = indexer.index_project(str(repo), commit="HEAD")
    assert head.files == 2  # new.py and .autarchignore; secret/ is ignored
    assert "secret/keys.py" not in _files(indexer, query="private thing", root=str(repo))
    with pytest.raises(IndexerError) as bad:
        indexer.index_project(str(repo), commit="no-such-branch")
    assert bad.value.code == IndexerErrorCode.UNKNOWN_COMMIT


def test_bad_input_gets_typed_errors(indexer: Indexer, repo: Path, tmp_path: Path) -> None:
    def code_of(call) -> tuple[str, str]:
        with pytest.raises(IndexerError) as error:
            call()
        return error.value.code, error.value.message

    plain = tmp_path / "plain"
    plain.mkdir()
    assert code_of(lambda: indexer.index_project(str(plain)))[0] == IndexerErrorCode.NOT_A_REPOSITORY
    assert code_of(lambda: indexer.index_project(str(tmp_path / "missing")))[0] == IndexerErrorCode.NOT_A_REPOSITORY
    assert code_of(lambda: indexer.search(SemanticSearch(query="x", root=str(repo)))) == (
        IndexerErrorCode.NOT_INDEXED,
        NOT_INDEXED_MESSAGE,
    )
    assert code_of(lambda: indexer.search(SemanticSearch(query="x", project="never-seen")))[1] == NOT_INDEXED_MESSAGE
    assert code_of(lambda: indexer.index_worktree("never-seen", str(repo)))[0] == IndexerErrorCode.UNKNOWN_PROJECT
    assert code_of(lambda: indexer.status(project="never-seen"))[0] == IndexerErrorCode.UNKNOWN_PROJECT
    indexed = indexer.index_project(str(repo))
    other = make_repo(tmp_path / "other", {"x.py": "x = 1\n"})
    git(other, "worktree", "add", "-q", "-b", "side", str(tmp_path / "other-wt"))
    assert code_of(lambda: indexer.index_worktree(indexed.project, str(tmp_path / "other-wt")))[0] == (
        ErrorCode.BAD_REQUEST
    )
    assert code_of(lambda: indexer.search(SemanticSearch(query="   ", root=str(repo))))[0] == (
        IndexerErrorCode.INVALID_QUERY
    )
    assert code_of(lambda: indexer.search(SemanticSearch(query="x", root=str(repo), pattern_weights=["*.py"])))[0] == (
        IndexerErrorCode.INVALID_PATTERN_WEIGHTS
    )
    assert code_of(lambda: indexer.search(SemanticSearch(query="x")))[0] == ErrorCode.BAD_REQUEST
    assert code_of(lambda: indexer.search(SemanticSearch(query="x", root=str(plain))))[0] == (
        IndexerErrorCode.NOT_A_REPOSITORY
    )
