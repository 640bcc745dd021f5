"""Chunks follow code structure; everything else falls back to line windows."""

from __future__ import annotations

from autarch.services.indexer.chunking import (
    MAX_CHUNK_LINES,
    WINDOW_LINES,
    Chunk,
    chunk_file,
    language_of,
    symbol_words,
)
from autarch.services.indexer.readable import readable_python


def _symbols(path: str, text: str) -> list[str]:
    return [c.symbol for c in chunk_file(path, text)]


def test_python_functions_classes_and_methods_of_large_classes() -> None:
    methods = "\n".join(f"    def method_{i}(self):\n" + "        x = 1\n" * 8 + "        return x\n" for i in range(8))
    source = f'''"""Module."""
import os

CONSTANT = 1


@decorator
def top(a, b):
    return a + b


class Small:
    def one(self):
        return 1


class Big:
    """A big class."""

    attribute = 2

{methods}
'''
    chunks = chunk_file("pkg/mod.py", source)
    symbols = [c.symbol for c in chunks]
    assert symbols[0] == ""  # module docstring, imports and constants
    assert "def top" in symbols and "class Small" in symbols and "class Big" in symbols
    assert [s for s in symbols if s.startswith("def Big.")] == [f"def Big.method_{i}" for i in range(8)]
    top = next(c for c in chunks if c.symbol == "def top")
    assert top.text.startswith("@decorator") and top.start_line == 7
    big = next(c for c in chunks if c.symbol == "class Big")
    assert "attribute = 2" in big.text and "def method_0" not in big.text
    lines = source.splitlines()
    for chunk in chunks:  # line numbers point at the chunk's text
        assert "\n".join(lines[chunk.start_line - 1 : chunk.end_line]) == chunk.text


def test_long_functions_are_cut_and_broken_python_falls_back_to_windows() -> None:
    long_function = "def long():\n" + "    x = 1\n" * (MAX_CHUNK_LINES * 2)
    chunks = chunk_file("a.py", long_function)
    assert len(chunks) > 1 and all(c.symbol == "def long" for c in chunks)
    assert all(c.end_line - c.start_line + 1 <= MAX_CHUNK_LINES for c in chunks)
    broken = "def broken(:\n" + "pass\n" * 120
    assert [c.symbol for c in chunk_file("b.py", broken)] == ["", "", ""]


def test_other_languages_follow_their_definitions() -> None:
    assert _symbols("a.js", "export class Router {\n  add() {}\n}\nfunction go() {\n  return 1;\n}\n") == [
        "class Router",
        "function go",
    ]
    assert "interface User" in _symbols("a.ts", "interface User {\n  name: string;\n}\nconst x = 1;\n")
    assert _symbols("a.go", "package m\n\nfunc (s *S) Run() error {\n\treturn nil\n}\n")[-1] == "method Run"
    assert "function parse" in _symbols("a.rs", "fn parse(input: &str) -> u32 {\n    1\n}\n")
    assert "class Main" in _symbols("A.java", "public class Main {\n  void run() {}\n}\n")


def test_markdown_sections_and_plain_text_windows() -> None:
    assert _symbols("README.md", "# Title\nintro\n## Usage\nrun it\n") == ["section Title", "section Usage"]
    text = "\n".join(f"line {i}" for i in range(WINDOW_LINES * 2 + 5))
    chunks = chunk_file("notes.txt", text)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 50), (51, 100), (101, 105)]
    assert chunk_file("empty.py", "\n\n  \n") == []
    assert language_of("dir.d/file") == "text" and language_of("x.TSX") == "tsx"


def test_the_dense_model_reads_the_symbol_name_in_plain_words() -> None:
    assert symbol_words("class HTTPMovedPermanently") == "http moved permanently"
    assert symbol_words("def Repo.get_HTTPHeader") == "repo get http header"
    assert symbol_words("async def Client.__aenter__") == "client aenter"
    # Nothing added when the name is already one plain word.
    assert symbol_words("def head") == "" and symbol_words("section Getting started") == ""
    chunk = Chunk(start_line=1, end_line=2, symbol="function addRoute", text="function addRoute() {}",
                  language="javascript")
    assert chunk.embedding_text == "function addRoute (add route)\nfunction addRoute() {}"
    assert Chunk(start_line=1, end_line=1, symbol="", text="x = 1", language="python").embedding_text == "x = 1"


def test_the_dense_model_reads_a_python_definition_as_its_prose_and_its_names_in_words() -> None:
    source = (
        "class App:\n"
        "    def add_route(self, uri_template: str, resource, **kwargs) -> None:\n"
        '        """Map a URI template to a resource.\n\n        Each responder is looked up once."""\n'
        "        # the router compiles lazily\n"
        '        self._router.add_route(uri_template, resource, suffix="on_get", sep="/")  # noqa: E501\n'
        "        return None\n"
    )
    [chunk] = chunk_file("app.py", source)
    assert chunk.embedding_text == (
        "class App\n"
        "Map a URI template to a resource. Each responder is looked up once.\n"
        "the router compiles lazily\n"
        # Keywords, self and the commonest type names say nothing; a string's words do, a separator does not.
        "app add route uri template resource router add route uri template resource suffix on get sep"
    )
    # Code that is no more than names still reads as names; an unclosed string does not stop it.
    assert readable_python("x = HTTPHeaders(maxLineSize)\n'unclosed") == "http headers max line size unclosed"
