"""grep: seed 004's constants (50 per call, skip, 10 MB, 10 % control characters), order, case, regex errors."""

from __future__ import annotations

import os

import pytest

from autarch.services.tools.grep import BINARY_CONTROL_RATIO, MAX_GREP_FILE_BYTES, compile_pattern, is_binary
from autarch.services.tools.grep_pool import GrepEngine
from autarch.services.tools.reading import MAX_GREP_RESULTS


def write(root, rel, data):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)


def hits(result):
    return [(r["file_path"], r["line_number"]) for r in result["results"]]


def test_constants_are_the_seeds():
    assert MAX_GREP_RESULTS == 50
    assert MAX_GREP_FILE_BYTES == 10 * 1024 * 1024
    assert BINARY_CONTROL_RATIO == 0.10


async def test_at_most_50_matches_with_skip_pagination_and_the_warning(tools, worktree):
    write(worktree, "a.txt", "match\n" * 100)
    write(worktree, "b.txt", "match\n" * 27)
    first = await tools("grep", {"pattern": "match"})
    assert len(first["results"]) == 50
    assert first["warning"] == (
        "Only showing 50 matches out of 127. Use skip parameter to paginate through more results."
    )
    assert list(first) == ["results", "warning"]
    assert hits(first)[0] == ("a.txt", 1) and hits(first)[-1] == ("a.txt", 50)
    second = await tools("grep", {"pattern": "match", "skip": 50})
    assert hits(second)[0] == ("a.txt", 51)
    third = await tools("grep", {"pattern": "match", "skip": 100})
    assert hits(third) == [("b.txt", n) for n in range(1, 28)]
    assert third["warning"].startswith("Only showing 27 matches out of 127.")
    exact = await tools("grep", {"pattern": "match", "glob": "b.txt"})
    assert "warning" not in exact and len(exact["results"]) == 27


async def test_results_sorted_by_path_then_line_one_per_line(tools, worktree):
    write(worktree, "z.py", "needle\n")
    write(worktree, "a/b.py", "x\nneedle needle\nneedle\n")
    write(worktree, "m.py", "no\n")
    assert hits(await tools("grep", {"pattern": "needle"})) == [("a/b.py", 2), ("a/b.py", 3), ("z.py", 1)]


async def test_case_insensitive_by_default(tools, worktree):
    write(worktree, "a.txt", "Hello\nHELLO\nhello\nhelo\n")
    assert hits(await tools("grep", {"pattern": "hello"})) == [("a.txt", 1), ("a.txt", 2), ("a.txt", 3)]
    assert hits(await tools("grep", {"pattern": "hello", "caseSensitive": True})) == [("a.txt", 3)]
    assert hits(await tools("grep", {"pattern": "(?i)HELLO", "caseSensitive": True})) == [
        ("a.txt", 1),
        ("a.txt", 2),
        ("a.txt", 3),
    ]


async def test_invalid_regex_gets_the_warning_shape(tools, worktree):
    write(worktree, "a.txt", "x\n")
    result = await tools("grep", {"pattern": "foo(["})
    assert list(result) == ["warning", "results"]
    assert result["results"] == []
    assert result["warning"].startswith("Invalid regex pattern: ")


async def test_regexes_are_line_oriented(tools, worktree):
    write(worktree, "a.py", "def foo():\n    return 1\nclass BarError(Exception):\nx = 'foo'")
    assert hits(await tools("grep", {"pattern": r"class \w+Error\("})) == [("a.py", 3)]
    assert hits(await tools("grep", {"pattern": r"foo\(\):\s+return"})) == []  # would span a line break
    assert hits(await tools("grep", {"pattern": r"^\s+return \d$"})) == [("a.py", 2)]
    assert hits(await tools("grep", {"pattern": "foo'$"})) == [("a.py", 4)]  # last line without a newline
    assert hits(await tools("grep", {"pattern": "^"})) == [("a.py", n) for n in (1, 2, 3, 4)]


async def test_skips_files_over_10_mb(tools, worktree):
    write(worktree, "big.txt", b"needle\n" + b"a" * MAX_GREP_FILE_BYTES)
    write(worktree, "edge.txt", b"needle\n" + b"a" * (MAX_GREP_FILE_BYTES - 7))
    assert hits(await tools("grep", {"pattern": "needle"})) == [("edge.txt", 1)]


def control_heavy(ratio: float, size: int = 4000) -> bytes:
    controls = int(size * ratio)
    return b"needle\n" + b"\x01" * controls + b"a" * (size - controls - 7)


async def test_skips_binary_files_by_control_character_ratio(tools, worktree):
    write(worktree, "binary.dat", control_heavy(0.11))
    write(worktree, "text.dat", control_heavy(0.09))
    write(worktree, "nul.dat", b"needle\n\x00rest")
    assert hits(await tools("grep", {"pattern": "needle"})) == [("text.dat", 1)]
    assert is_binary(control_heavy(0.10)) and not is_binary(control_heavy(0.099))
    assert not is_binary(b"tabs\tand\r\nform\x0cfeeds\n")


async def test_glob_filter_ignore_files_and_sensitive_files(tools, worktree):
    write(worktree, "src/a.cs", "needle\n")
    write(worktree, "src/b.py", "needle\n")
    write(worktree, "vendor/c.cs", "needle\n")
    write(worktree, ".gitignore", "vendor/\n")
    write(worktree, ".env", "needle=1\n")
    write(worktree, ".github/workflows/ci.yml", "needle\n")
    assert hits(await tools("grep", {"pattern": "needle", "glob": "**/*.cs"})) == [("src/a.cs", 1)]
    assert hits(await tools("grep", {"pattern": "needle", "glob": "*.py"})) == [("src/b.py", 1)]
    assert hits(await tools("grep", {"pattern": "needle"})) == [
        (".github/workflows/ci.yml", 1),
        ("src/a.cs", 1),
        ("src/b.py", 1),
    ]


async def test_symlinks_are_not_followed(tools, worktree, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("needle\n")
    os.symlink(outside, worktree / "out")
    os.symlink(outside / "secret.txt", worktree / "link.txt")
    assert hits(await tools("grep", {"pattern": "needle"})) == []


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        ("def __init__", b"def __init__"),
        (r"class \w+Error\(", b"error("),
        ("foo|bar", None),
        (r"x(?:abc)+y", b"abc"),
        (r"[a-z]+", None),
    ],
)
def test_required_literal_prefilter(pattern, literal):
    assert compile_pattern(pattern, False).literal == literal


def test_worker_pool_finds_what_the_process_finds(tmp_path):
    for i in range(30):
        write(tmp_path, f"d{i % 3}/f{i}.txt", "x\nneedle\n" * (i % 4))
    files = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.txt"))
    pattern = compile_pattern("NEEDLE", False)
    local = GrepEngine(workers=0).search(str(tmp_path), files, pattern)
    pool = GrepEngine(workers=2, parallel_min_files=1)
    pool.start()
    try:
        assert pool.search(str(tmp_path), files, pattern) == local
    finally:
        pool.close()
    assert sum(len(lines) for _, lines in local) == sum(i % 4 for i in range(30))


async def test_cached_contents_are_never_stale(tools, worktree):
    path = worktree / "a.txt"
    path.write_text("needle\n")
    os.utime(path, (1_000_000, 1_000_000))  # old enough to be cached
    assert hits(await tools("grep", {"pattern": "needle"})) == [("a.txt", 1)]
    stat = path.stat()
    path.write_text("nothin\n")  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime: only ctime tells
    assert hits(await tools("grep", {"pattern": "needle"})) == []
    assert hits(await tools("grep", {"pattern": "nothin"})) == [("a.txt", 1)]


def test_recently_modified_files_are_not_cached(tmp_path):
    from autarch.services.tools.grep import ContentCache

    fresh = tmp_path / "fresh.txt"
    fresh.write_text("x\n")
    old = tmp_path / "old.txt"
    old.write_text("y\n")
    os.utime(old, (1_000_000, 1_000_000))
    cache = ContentCache()
    assert cache.load(str(fresh)).data == b"x\n" and cache.load(str(old)).data == b"y\n"
    assert list(cache._entries) == [str(old)]
    small = ContentCache(limit_bytes=3)
    small.load(str(old))
    entry = small.load(str(old))
    before = entry.size
    entry.lowered()
    small.account(entry, before)
    assert list(small._entries) == []  # over the limit: evicted


def test_cache_accounting_counts_only_what_it_holds(tmp_path):
    from autarch.services.tools.grep import ContentCache

    old = tmp_path / "old.txt"
    old.write_text("abc\n" * 10)
    os.utime(old, (1_000_000, 1_000_000))
    fresh = tmp_path / "fresh.txt"
    fresh.write_text("abc\n" * 10)
    cache = ContentCache()
    for path in (old, fresh):
        entry = cache.load(str(path))
        before = entry.size
        entry.lowered()
        entry.line_starts()
        cache.account(entry, before)
    held = cache._entries[str(old)]
    assert cache._bytes == held.size == 40 + 40 + 8 * 12
