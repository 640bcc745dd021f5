"""Pattern overlap is sound: whenever some path is covered by two patterns, they are said to overlap."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autarch.runtime.leases import lease_covers, normalize_pattern, patterns_overlap

_PATHS = ["/".join(parts) for n in (1, 2, 3) for parts in itertools.product(["a", "b", "ab", "c.py"], repeat=n)]
"""Every path of up to three segments over a small alphabet: the witnesses an overlap is checked against."""

_segment = st.sampled_from(["a", "b", "ab", "c.py", "*", "?", "a*", "*.py", "[ab]", "[!a]", "**", "{a,b}", "{ab,c.py}"])
_pattern = st.lists(_segment, min_size=1, max_size=3).map("/".join)


@settings(max_examples=400, deadline=None)
@given(_pattern, _pattern)
def test_overlap_is_never_missed(a: str, b: str) -> None:
    witness = next((path for path in _PATHS if lease_covers(a, path) and lease_covers(b, path)), None)
    if witness is not None:
        assert patterns_overlap(a, b), f"{a!r} and {b!r} both cover {witness!r}"
    assert patterns_overlap(a, b) == patterns_overlap(b, a)


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("src/a.py", "src/a.py", True),
        ("src", "src/a.py", True),
        ("src/a.py", "src/a.pyc", False),
        ("src/*.py", "src/*.ts", False),
        ("**/*.py", "docs/*.md", False),
        ("src/{a,b}.py", "src/c.py", False),
        ("src/[ab].py", "src/?.py", True),
        ("a/**/c", "a/c", True),
        ("src/*", "src/a/b.py", False),
        ("*.py", "src/a.py", False),
    ],
)
def test_known_pairs(a: str, b: str, overlap: bool) -> None:
    assert patterns_overlap(a, b) is overlap


def test_literal_path_covers_itself_and_below() -> None:
    assert lease_covers("src", "src/a/b.py")
    assert not lease_covers("src", "srcx/a.py")
    assert lease_covers("src/**", "src/a/b.py")
    assert normalize_pattern("./src//a/") == "src/a"
