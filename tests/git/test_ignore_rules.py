"""What a checkpoint treats as ignored is what git treats as ignored (``git ls-files --others --exclude-standard``)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from dulwich.repo import Repo

from autarch.services.git.workspace import Workspace

FILES = [
    "a.txt", "b.txt", "{a,b}.txt", "keep.log", "drop.log", "x y", "[ab]",
    "build/out.o", "build/keep", "gen/a/b.c", "gen/keep.c", "docs/x.md", "docs/sub/y.md",
    "src/.gitignore", "src/m.py", "src/m.pyc", "src/deep/n.pyc", "src/deep/keep.pyc",
    "CaSe.TXT", "lib/.gitignore", "lib/lx.py", "lib/keep.py",
    "notes/.autarchignore", "notes/secret.txt", "top", "sub/top", "cache/.gitignore", "cache/blob",
]  # fmt: skip

RULES = {
    ".gitignore": "{a,b}.txt\n*.log\n!keep.log\nbuild/\n!build/keep\ngen/**\n!gen/keep.c\n"
    "/top\nx\\ y\n\\[ab]\ncase.txt\n",
    "src/.gitignore": "*.pyc\n!deep/keep.pyc\n",
    "lib/.gitignore": "l*\n",
    # A directory's own .gitignore does not apply to the directory itself: "*" there ignores its
    # contents, and "!.gitignore" keeps that file.
    "cache/.gitignore": "*\n!.gitignore\n",
    "notes/.autarchignore": "secret.txt\n",
    ".git/info/exclude": "docs/*/\n",
}


@pytest.mark.parametrize("ignorecase", [False, True])
def test_untracked_files_match_git(tmp_path: Path, ignorecase: bool) -> None:
    root = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "config", "core.ignorecase", str(ignorecase).lower()], cwd=root, check=True)
    for rel in FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x\n")
    for rel, text in RULES.items():
        (root / rel).write_text(text)
    listed = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard", "-z"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = set(filter(None, listed.split("\0")))
    repo = Repo(str(root))
    try:
        check = Workspace(repo=repo, record=SimpleNamespace(worktree_path=str(root))).ignore_check()  # type: ignore[arg-type]  # only the worktree path is read
        ours = set()
        for dirpath, _dirs, names in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            if rel_dir.split(os.sep)[0] == ".git":
                continue
            for name in names:
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not check(rel):
                    ours.add(rel)
        assert check("build/") and not check("docs/") and check("docs/sub/")
    finally:
        repo.close()
    assert ours == expected
    assert "a.txt" in ours and "{a,b}.txt" not in ours and "notes/secret.txt" in ours and "lib/keep.py" in ours
    assert "cache/.gitignore" in ours and "cache/blob" not in ours
    assert ("CaSe.TXT" in ours) is not ignorecase
