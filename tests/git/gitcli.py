"""The git command line as the tests' oracle, and the repositories the tests start from."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "Dev User",
    "GIT_AUTHOR_EMAIL": "dev@example.com",
    "GIT_COMMITTER_NAME": "Dev User",
    "GIT_COMMITTER_EMAIL": "dev@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def git(cwd: Path, *args: str, check: bool = True) -> str:
    """Run the git CLI in ``cwd`` and return its stdout (stripped)."""
    result = subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result.stdout.strip()


def fsck(repo: Path) -> None:
    """``git fsck --strict`` finds no error (dangling objects are not errors)."""
    result = subprocess.run(
        ["git", "fsck", "--strict", "--no-dangling", "--no-progress"],
        cwd=repo,
        env=GIT_ENV,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), (
        result.stdout + result.stderr
    )


def repo_state(repo: Path) -> dict[str, str]:
    """Everything a user could see changed: refs, HEAD, status, worktrees, loose object count, index."""
    return {
        "refs": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        "head": git(repo, "symbolic-ref", "-q", "HEAD", check=False) + " " + git(repo, "rev-parse", "HEAD"),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "worktrees": git(repo, "worktree", "list", "--porcelain"),
        "objects": git(repo, "count-objects"),
        "index": (repo / ".git" / "index").read_bytes().hex(),
    }


def make_user_repo(path: Path) -> Path:
    """A repository as a developer has it: a few commits, local edits and untracked files."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    files = {
        "README.md": "# Demo\n",
        "src/app.py": "def main():\n    return 1\n",
        "src/util.py": "VALUE = 1\n",
        "docs/guide.md": "Guide\n",
        ".gitignore": "node_modules/\n*.log\n",
        "bin/run.sh": "#!/bin/sh\necho run\n",
    }
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(content)
    (path / "bin/run.sh").chmod(0o755)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    git(path, "branch", "feature")
    (path / "src/util.py").write_text("VALUE = 2  # the developer's own edit\n")
    (path / "scratch.txt").write_text("not committed\n")
    git(path, "add", "src/util.py")  # something staged, too
    (path / "README.md").write_text("# Demo, edited\n")
    return path
