"""Chunks that follow code structure: functions, classes and methods, with line windows for the rest.

Python is parsed with the standard library's ``ast``; JavaScript, TypeScript, Go, Rust and Java with
tree-sitter grammars when installed. Everything else (and code that does not parse) is cut into line
windows; Markdown at its headings. A chunk never exceeds :data:`MAX_CHUNK_LINES`.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from .readable import name_words, readable_python

__all__ = ["EMBEDDING_TEXT_VERSION", "MAX_CHUNK_LINES", "WINDOW_LINES", "Chunk", "chunk_file", "language_of"]

MAX_CHUNK_LINES = 120
"""A definition longer than this is cut into windows (a model only reads the first few hundred tokens)."""
WINDOW_LINES = 50
"""Size of line windows for unstructured text and for the code between definitions."""
EMBEDDING_TEXT_VERSION = 4
"""Changes when what the dense model reads of a chunk does (3: the symbol in plain words, 4: a Python
definition as prose and words): stores keep vectors of one version apart from another's."""
SMALL_CONTAINER_LINES = 60
"""A class (impl, interface) up to this long stays one chunk; a longer one is split into its members."""


@dataclass(frozen=True)
class Chunk:
    start_line: int
    """First line, 1-based."""
    end_line: int
    """Last line, inclusive."""
    symbol: str
    """What the chunk is (``class Repo``, ``def Repo.head``), or '' for plain text."""
    text: str
    language: str = "text"
    """What :func:`language_of` called the file."""

    @property
    def embedding_text(self) -> str:
        """What the dense model reads: the symbol as a heading (its name also in plain words), then the code;
        a Python definition's code as its prose and names in words (see :mod:`.readable`)."""
        if not self.symbol:
            return self.text
        words = symbol_words(self.symbol)
        heading = f"{self.symbol} ({words})" if words else self.symbol
        body = readable_python(self.text) if self.language == "python" else self.text
        return f"{heading}\n{body}"


def symbol_words(symbol: str) -> str:
    """The name of a chunk's symbol in lower-case words (``def Repo.get_HTTPHeader`` -> ``repo get http
    header``), or '' when that adds nothing to the symbol (a one-word lower-case name)."""
    _, _, name = symbol.removeprefix("async ").partition(" ")
    text = " ".join(name_words(name))
    return "" if text == name.lower() else text


_EXTENSIONS = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".jsx": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".ts": "typescript",
    ".tsx": "tsx",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".md": "markdown",
    ".markdown": "markdown",
    ".rst": "text",
}


def language_of(path: str) -> str:
    """Language name chunking uses for ``path`` (``text`` when unknown)."""
    dot = path.rfind(".")
    return _EXTENSIONS.get(path[dot:].lower(), "text") if dot > path.rfind("/") else "text"


def chunk_file(path: str, text: str) -> list[Chunk]:
    """Cut one file into chunks (empty for an empty or whitespace-only file)."""
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        return []
    language = language_of(path)
    spans: list[tuple[int, int, str]] | None = None
    if language == "python":
        spans = _python_spans(text, len(lines))
    elif language == "markdown":
        spans = _markdown_spans(lines)
    elif language != "text":
        spans = _tree_sitter_spans(language, text.encode("utf-8", "surrogatepass"), len(lines))
    if spans is None:
        spans = _windows(1, len(lines), "")
    return [
        chunk for start, end, symbol in spans if (chunk := _make(lines, start, end, symbol, language)) is not None
    ]


def _make(lines: list[str], start: int, end: int, symbol: str, language: str) -> Chunk | None:
    while start < end and not lines[start - 1].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    body = "\n".join(lines[start - 1 : end])
    if not body.strip():
        return None
    return Chunk(start_line=start, end_line=end, symbol=symbol, text=body, language=language)


def _windows(start: int, end: int, symbol: str, size: int = WINDOW_LINES) -> list[tuple[int, int, str]]:
    return [(s, min(s + size - 1, end), symbol) for s in range(start, end + 1, size)]


def _bounded(start: int, end: int, symbol: str) -> list[tuple[int, int, str]]:
    if end - start + 1 <= MAX_CHUNK_LINES:
        return [(start, end, symbol)]
    return _windows(start, end, symbol, size=MAX_CHUNK_LINES * 2 // 3)


def _fill_gaps(spans: list[tuple[int, int, str]], total: int, symbol: str = "") -> list[tuple[int, int, str]]:
    """Add windows over the lines no definition covers (imports, constants, scripts)."""
    out: list[tuple[int, int, str]] = []
    cursor = 1
    for start, end, sym in sorted(spans):
        if start > cursor:
            out.extend(_windows(cursor, start - 1, symbol))
        out.append((start, end, sym))
        cursor = max(cursor, end + 1)
    if cursor <= total:
        out.extend(_windows(cursor, total, symbol))
    return out


# Python ------------------------------------------------------------------------------------------


def _python_spans(text: str, total: int) -> list[tuple[int, int, str]] | None:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    spans: list[tuple[int, int, str]] = []
    for node in tree.body:
        spans.extend(_python_node(node, prefix=""))
    return _fill_gaps(spans, total)


def _python_node(node: ast.stmt, *, prefix: str) -> list[tuple[int, int, str]]:
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return []
    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    end = node.end_lineno or node.lineno
    name = f"{prefix}{node.name}"
    if isinstance(node, ast.ClassDef):
        symbol = f"class {name}"
        members = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
        if end - start + 1 <= SMALL_CONTAINER_LINES or not members:
            return _bounded(start, end, symbol)
        spans: list[tuple[int, int, str]] = []
        for member in members:
            spans.extend(_python_node(member, prefix=f"{name}."))
        # The class line, docstring and attributes up to the first member form the class's own chunk.
        first = min(s for s, _, _ in spans)
        head = _bounded(start, first - 1, symbol) if first > start else []
        inner = [s for s in _fill_gaps(spans, end, symbol) if s[0] >= first]
        return head + inner
    kind = "async def" if isinstance(node, ast.AsyncFunctionDef) else "def"
    return _bounded(start, end, f"{kind} {name}")


# Markdown ----------------------------------------------------------------------------------------

_HEADING = re.compile(r"^#{1,6}\s+(.*)")


def _markdown_spans(lines: list[str]) -> list[tuple[int, int, str]]:
    starts = [(i + 1, m.group(1).strip()) for i, line in enumerate(lines) if (m := _HEADING.match(line))]
    if not starts:
        return _windows(1, len(lines), "")
    spans: list[tuple[int, int, str]] = []
    if starts[0][0] > 1:
        spans.extend(_windows(1, starts[0][0] - 1, ""))
    for index, (start, title) in enumerate(starts):
        end = starts[index + 1][0] - 1 if index + 1 < len(starts) else len(lines)
        spans.extend(_windows(start, end, f"section {title}", size=MAX_CHUNK_LINES // 2))
    return spans


# tree-sitter -------------------------------------------------------------------------------------

# Node types that are a definition worth its own chunk, per language.
_DEFINITIONS = {
    "javascript": {
        "function_declaration",
        "generator_function_declaration",
        "class_declaration",
        "method_definition",
        "lexical_declaration",
        "variable_declaration",
    },
    "go": {"function_declaration", "method_declaration", "type_declaration"},
    "rust": {"function_item", "impl_item", "struct_item", "enum_item", "trait_item", "mod_item", "macro_definition"},
    "java": {
        "class_declaration",
        "interface_declaration",
        "enum_declaration",
        "record_declaration",
        "method_declaration",
        "constructor_declaration",
    },
}
_DEFINITIONS["typescript"] = _DEFINITIONS["javascript"] | {
    "interface_declaration",
    "type_alias_declaration",
    "enum_declaration",
    "abstract_class_declaration",
    "function_signature",
    "method_signature",
    "module",
}
_DEFINITIONS["tsx"] = _DEFINITIONS["typescript"]
# Wrappers whose child is the definition (``export class …``).
_WRAPPERS = {"export_statement", "decorated_definition", "ambient_declaration"}


@cache
def _parser(language: str) -> Any:
    """A tree-sitter parser for ``language``, or ``None`` when its grammar is not installed."""
    try:
        import tree_sitter

        if language == "javascript":
            import tree_sitter_javascript as grammar

            handle = grammar.language()
        elif language in ("typescript", "tsx"):
            import tree_sitter_typescript as ts_grammar

            handle = ts_grammar.language_typescript() if language == "typescript" else ts_grammar.language_tsx()
        elif language == "go":
            import tree_sitter_go as go_grammar

            handle = go_grammar.language()
        elif language == "rust":
            import tree_sitter_rust as rust_grammar

            handle = rust_grammar.language()
        elif language == "java":
            import tree_sitter_java as java_grammar

            handle = java_grammar.language()
        else:
            return None
        return tree_sitter.Parser(tree_sitter.Language(handle))
    except ImportError:
        return None


def _tree_sitter_spans(language: str, source: bytes, total: int) -> list[tuple[int, int, str]] | None:
    parser = _parser(language)
    if parser is None:
        return None
    tree = parser.parse(source)
    definitions = _DEFINITIONS[language]
    spans: list[tuple[int, int, str]] = []
    for child in tree.root_node.children:
        spans.extend(_ts_node(child, definitions, prefix=""))
    return _fill_gaps(spans, total)


def _ts_name(node: Any) -> str:
    name = node.child_by_field_name("name")
    if name is None and node.type in ("impl_item",):
        name = node.child_by_field_name("type")
    if name is None and node.type in ("lexical_declaration", "variable_declaration", "type_declaration"):
        for child in node.named_children:
            inner = child.child_by_field_name("name")
            if inner is not None:
                name = inner
                break
    return name.text.decode("utf-8", "replace") if name is not None and name.text else ""


def _ts_node(node: Any, definitions: set[str], *, prefix: str) -> list[tuple[int, int, str]]:
    target = node
    if node.type in _WRAPPERS:
        inner = [c for c in node.named_children if c.type in definitions]
        if not inner:
            return []
        target = inner[0]
    if target.type not in definitions:
        return []
    start, end = node.start_point[0] + 1, node.end_point[0] + 1
    name = _ts_name(target)
    kind = target.type.replace("_declaration", "").replace("_definition", "").replace("_item", "")
    symbol = f"{kind} {prefix}{name}".strip()
    if end - start + 1 <= SMALL_CONTAINER_LINES:
        return [(start, end, symbol)]
    body = target.child_by_field_name("body")
    members: list[tuple[int, int, str]] = []
    if body is not None:
        for child in body.named_children:
            members.extend(_ts_node(child, definitions, prefix=f"{prefix}{name}." if name else prefix))
    if not members:
        return _bounded(start, end, symbol)
    first = min(s for s, _, _ in members)
    head = _bounded(start, first - 1, symbol) if first > start else []
    return head + [s for s in _fill_gaps(members, end, symbol) if s[0] >= first]
