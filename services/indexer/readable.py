"""Python code as the dense model reads it: its prose as written, its names as plain words.

The default model (all-MiniLM-L6-v2) learned English, and reads only the first 128 word pieces of a
chunk. Raw code spends most of them on punctuation, annotations and fragments of names
(``_cookies_to_send`` is five pieces, none of them a word it knows in that sense). Read instead as the
docstrings and comments, then every name split into lower-case words (keywords and the commonest type
names left out), a chunk says more about what it does in the same budget, and a question asked in
other words than the code's meets it more often. Measured on the search sets in ``docs/indexer.md``.
"""

from __future__ import annotations

import keyword
import re

__all__ = ["name_words", "readable_python"]

# A triple-quoted string, a one-line string, or a comment; strings may carry a prefix (f, b, r), which
# becomes a one-letter name and is dropped with the others.
_PROSE_OR_STRING = re.compile(
    r'("""|\'\'\')(?P<doc>.*?)\1|(?P<q>["\'])(?P<string>(?:\\.|(?!(?P=q)).)*)(?P=q)|#(?P<comment>[^\n]*)', re.S
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z]|[0-9]|\b)|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
_HAS_WORD = re.compile(r"[A-Za-z]{3}")
_TOOL_COMMENTS = ("noqa", "type:", "pragma")
# Words on nearly every line of Python that say nothing about what a chunk does.
_NOISE = frozenset(w.lower() for w in keyword.kwlist) | {
    "self", "cls", "str", "int", "bool", "args", "kwargs", "optional", "typing", "any", "list", "dict", "tuple",
}  # fmt: skip


def name_words(name: str) -> list[str]:
    """A name in lower-case words, whatever its style (``Repo.get_HTTPHeader`` -> repo, get, http, header)."""
    return [word.lower() for part in _SEPARATORS.split(name) if part for word in _WORD.findall(part)]


def readable_python(code: str) -> str:
    """Docstrings and comments first (one line each, whitespace collapsed), then the code's names and the
    words of its one-line strings, split into lower-case words, in the order they appear."""
    prose: list[str] = []
    code_parts: list[str] = []
    last = 0
    for match in _PROSE_OR_STRING.finditer(code):
        code_parts.append(code[last : match.start()])
        last = match.end()
        if match.group("doc") is not None:
            prose.append(" ".join(match.group("doc").split()))
        elif match.group("comment") is not None:
            comment = match.group("comment").strip()
            if comment and not comment.startswith(_TOOL_COMMENTS):
                prose.append(comment)
        elif _HAS_WORD.search(match.group("string")):
            # A header name or a message says what the code is about; a format or a separator does not.
            code_parts.append(f" {match.group('string')} ")
    code_parts.append(code[last:])
    words = [
        word
        for name in _NAME.findall(" ".join(code_parts))
        for word in name_words(name)
        if len(word) > 1 and word not in _NOISE
    ]
    return "\n".join([*(p for p in prose if p), " ".join(words)]).strip()
