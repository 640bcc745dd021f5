"""The ignore engine (``autarch.runtime.ignore``) against ``git check-ignore`` on generated rules and trees.

Seeded random ignore files (``*``, ``**``, ``?``, ``[...]``, ``{a,b}``, leading and trailing ``/``,
``!``, escapes, comments, trailing spaces) at the root and in nested directories, plus
``.git/info/exclude``, over a tree of files and directories with awkward names; every path of the
tree must get git's answer.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from autarch.runtime.ignore import GIT_IGNORE_FILES, IGNORE_FILES, Ignorer

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

NAMES = ["a", "b", "ab", "a.txt", "b.txt", "c.py", "{a,b}.txt", "a b", "[ab]", "a*", "!x", "#x", "x\\y", "ba", ".h"]
ATOMS = [
    "a", "b", "a", "b", ".txt", ".py", "*", "*", "**", "?", "/", "/", "[ab]", "[!a]", "[a-c]", "{a,b}",
    "/**/", "\\*", "\\?", "\\[", "\\!", "\\#", "\\ ", " ", "x", "\\y", ",",
]  # fmt: skip


def _pattern(rng: random.Random) -> str:
    body = "".join(rng.choice(ATOMS) for _ in range(rng.randint(1, 5)))
    roll = rng.random()
    if roll < 0.15:
        body = "/" + body
    elif roll < 0.25:
        body = "**/" + body
    roll = rng.random()
    if roll < 0.15:
        body += "/"
    elif roll < 0.2:
        body += "/**"
    if rng.random() < 0.25:
        body = "!" + body
    elif rng.random() < 0.03:
        body = "#" + body
    return body


def _tree(rng: random.Random, root: Path) -> list[tuple[str, bool]]:
    entries: list[tuple[str, bool]] = []

    def fill(rel: str, depth: int) -> None:
        for name in rng.sample(NAMES, rng.randint(3, 7)):
            path = f"{rel}/{name}" if rel else name
            if depth < 3 and rng.random() < 0.4:
                (root / path).mkdir()
                entries.append((path, True))
                fill(path, depth + 1)
            else:
                (root / path).write_text("x\n")
                entries.append((path, False))

    fill("", 0)
    return entries


def _ignore_text(rng: random.Random) -> str:
    return "\n".join(_pattern(rng) for _ in range(rng.randint(1, 6))) + "\n"


def _git_ignored(root: Path, paths: list[str]) -> dict[str, bool]:
    result = subprocess.run(
        ["git", "-c", "core.excludesFile=/dev/null", "check-ignore", "--no-index", "-v", "-n", "-z", "--stdin"],
        cwd=root,
        input="\0".join(paths) + "\0",
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    fields = result.stdout.split("\0")
    answers = {}
    for i in range(0, len(fields) - 1, 4):
        _source, _line, pattern, path = fields[i : i + 4]
        answers[path] = bool(pattern) and not pattern.startswith("!")
    return answers


def _case(seed: int, tmp_path: Path) -> list[str]:
    rng = random.Random(seed)
    root = tmp_path / f"repo{seed}"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    entries = _tree(rng, root)
    dirs = [""] + [path for path, is_dir in entries if is_dir]
    rules = {}
    for directory in rng.sample(dirs, min(len(dirs), rng.randint(1, 3))):
        text = _ignore_text(rng)
        (root / directory / ".gitignore").write_text(text)
        rules[directory or "."] = text
    if rng.random() < 0.4:
        text = _ignore_text(rng)
        (root / ".git" / "info" / "exclude").write_text(text)
        rules["info/exclude"] = text
    paths = [path for path, _ in entries]
    git = _git_ignored(root, paths)
    ours = Ignorer.for_worktree(str(root), files=GIT_IGNORE_FILES)
    return [
        f"seed {seed}: {path!r} (dir={is_dir}) git={git[path]} ours={not git[path]} rules={rules}"
        for path, is_dir in entries
        if ours.is_ignored(path, is_dir=is_dir) != git[path]
    ]


@pytest.mark.parametrize("chunk", range(4))
def test_agrees_with_git_check_ignore(tmp_path: Path, chunk: int) -> None:
    disagreements: list[str] = []
    for seed in range(chunk * 80, chunk * 80 + 80):
        disagreements.extend(_case(seed, tmp_path))
    assert not disagreements, "\n".join(disagreements[:20])


@pytest.mark.parametrize(
    ("rules", "path", "is_dir", "ignored"),
    [
        ("{a,b}.txt\n", "a.txt", False, False),  # no brace expansion in git
        ("{a,b}.txt\n", "{a,b}.txt", False, True),
        ("build/\n", "build", False, False),
        ("build/\n", "build", True, True),
        ("build/\n!build/keep\n", "build/keep", False, True),  # no re-include below an ignored directory
        ("build/*\n!build/keep\n", "build/keep", False, False),
        ("/top\n", "sub/top", False, False),
        ("doc/*.txt\n", "doc/x/y.txt", False, False),
        ("doc/**/*.txt\n", "doc/x/y.txt", False, True),
        ("a/**\n!a/b\n", "a/b", False, False),
        ("\\!x\n", "!x", False, True),
        ("x\\ \n", "x ", False, True),
        ("x   \n", "x", False, True),
        ("/**/\n", "a", True, True),
        ("a/**/\n", "a", True, False),
        ("a/**/\n", "a/b", True, True),
        ("a/**/\n", "a/c", False, False),
    ],
)
def test_examples(tmp_path: Path, rules: str, path: str, is_dir: bool, ignored: bool) -> None:
    (tmp_path / ".gitignore").write_text(rules)
    assert Ignorer(str(tmp_path)).is_ignored(path, is_dir=is_dir) is ignored


def test_nested_files_and_autarchignore(tmp_path: Path) -> None:
    os.makedirs(tmp_path / "sub" / "deep")
    (tmp_path / ".gitignore").write_text("*.log\n")
    (tmp_path / "sub" / ".gitignore").write_text("!keep.log\n")
    (tmp_path / "sub" / ".autarchignore").write_text("secret.txt\n")
    ours = Ignorer(str(tmp_path), files=IGNORE_FILES)
    git_only = Ignorer(str(tmp_path), files=GIT_IGNORE_FILES)
    assert ours.is_ignored("a.log")
    assert not ours.is_ignored("sub/keep.log")
    assert ours.is_ignored("sub/deep/other.log")
    assert ours.is_ignored("sub/secret.txt")
    assert not git_only.is_ignored("sub/secret.txt")
    assert ours("sub/deep/") is False
