"""Which files get indexed: ignore files at every level, defaults, binaries, huge files, symlinks."""

from __future__ import annotations

import os
from pathlib import Path

from autarch.services.indexer.repository import blob_id, locate_project
from autarch.services.indexer.walker import IgnoreRules, skip_reason, walk_worktree

from .conftest import git, make_repo


def _paths(root: Path, **kwargs) -> tuple[set[str], dict[str, int]]:
    result = walk_worktree(locate_project(root), **kwargs)
    return {f.path for f in result.files}, dict(result.skipped)


def test_gitignore_and_autarchignore_at_every_level(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {
            ".gitignore": "*.log\nbuild/\n",
            ".autarchignore": "vendor/\n!keep.log\n",
            "src/.gitignore": "generated_*.py\n",
            "src/.autarchignore": "secret_notes.txt\n",
            "src/main.py": "print('main')\n",
            "src/generated_api.py": "x = 1\n",
            "src/secret_notes.txt": "notes\n",
            "build/out.py": "x = 1\n",
            "vendor/lib.py": "x = 1\n",
            "debug.log": "log\n",
            "keep.log": "kept by a negation in .autarchignore\n",
            "node_modules/pkg/index.js": "module.exports = 1\n",
            ".env": "API_KEY=secret\n",
        },
        commit=False,
    )
    paths, skipped = _paths(repo)
    assert "src/main.py" in paths and "keep.log" in paths
    for ignored in (
        "src/generated_api.py",
        "src/secret_notes.txt",
        "build/out.py",
        "vendor/lib.py",
        "debug.log",
        "node_modules/pkg/index.js",
        ".env",
    ):
        assert ignored not in paths, ignored
    assert skipped["ignored"] >= 6


def test_binary_large_minified_symlink_and_nested_repo_are_skipped(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "r",
        {
            "ok.py": "def ok():\n    return 1\n",
            "image.png": b"\x89PNG\r\n\x1a\n\0\0\0IHDR" + bytes(100),
            "latin1.txt": "caf\xe9".encode("latin-1"),
            "big.py": "x = 1\n" * 50_000,
            "bundle.js": "var a=1;" * 5000,
        },
        commit=False,
    )
    os.symlink(repo / "ok.py", repo / "link.py")
    make_repo(repo / "sub", {"inner.py": "x = 1\n"})
    paths, skipped = _paths(repo, max_file_bytes=100_000)
    assert paths == {"ok.py"}
    assert skipped["binary"] == 2 and skipped["too_large"] == 1 and skipped["minified"] == 1
    assert skipped["symlink"] == 1


def test_blob_ids_match_git(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "r", {"a.py": "print('hello')\n", "b.txt": "two\nlines\n"})
    result = walk_worktree(locate_project(repo))
    for f in result.files:
        if f.path in ("a.py", "b.txt"):
            assert f.blob_id == git(repo, "rev-parse", f"HEAD:{f.path}")
    assert blob_id(b"") == "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"


def test_skip_reason_and_rules_directly() -> None:
    assert skip_reason(b"text\n", max_file_bytes=10) is None
    assert skip_reason(b"x" * 11, max_file_bytes=10) == "too_large"
    rules = IgnoreRules(root_lines=["*.tmp"])
    rules.add_directory("", {".gitignore": "docs/\n"})
    rules.add_directory("src", {".gitignore": "!keep.tmp\n"})
    assert rules.is_ignored("a.tmp") and not rules.is_ignored("src/keep.tmp")
    assert rules.is_ignored("docs", is_dir=True) and not rules.is_ignored("docs")
