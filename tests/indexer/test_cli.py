"""``autarch index`` and ``autarch search`` in-process, with no service running."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autarch.cli.main import main
from autarch.contracts.indexer import NOT_INDEXED_MESSAGE


def test_index_then_search_for_people_and_scripts(
    repo: Path, data_dir: Path, embedder, capsys: pytest.CaptureFixture[str]
) -> None:
    common = ["--data-dir", str(data_dir)]
    assert main(["search", str(repo), "router", *common, "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"error": NOT_INDEXED_MESSAGE, "code": "not_indexed"}

    assert main(["index", str(repo), *common]) == 0
    captured = capsys.readouterr()
    assert "indexed" in captured.out and "6 files" in captured.out
    assert "embedding" in captured.err  # progress lines

    assert main(["search", str(repo), "dispatch requests to route handlers", *common]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith(" 1. web/router.js:")

    assert main(["search", str(repo), "password", "--max-results", "2", "--json", *common]) == 0
    results = json.loads(capsys.readouterr().out)
    assert len(results) == 2 and {"file_path", "start_line", "end_line", "snippet", "score", "adjusted_score"} == set(
        results[0]
    )

    assert main(["search", str(repo), "password", "--pattern-weight", "bad", *common]) == 1
    assert "patternWeights[0]" in capsys.readouterr().err
    assert main(["search", str(repo), "", *common]) == 2


def test_index_refuses_a_path_that_is_not_a_repository(tmp_path: Path, data_dir: Path, capsys) -> None:
    assert main(["index", str(tmp_path), "--data-dir", str(data_dir)]) == 1
    assert "not inside a git repository" in capsys.readouterr().err


def test_index_and_search_with_a_model_of_ones_own(
    repo: Path, data_dir: Path, tmp_path: Path, export_minilm, capsys
) -> None:
    folder = export_minilm(tmp_path / "export")
    own = ["--data-dir", str(data_dir), "--embedding-backend", "onnx", "--embedding-model", str(folder)]
    assert main(["index", str(repo), *own]) == 0
    assert "6 files" in capsys.readouterr().out
    assert main(["search", str(repo), "dispatch requests to route handlers", *own]) == 0
    assert capsys.readouterr().out.splitlines()[0].startswith(" 1. web/router.js:")

    missing = ["--data-dir", str(data_dir), "--embedding-backend", "onnx", "--embedding-model", str(tmp_path / "none")]
    assert main(["search", str(repo), "router", *missing]) == 1
    assert "no model.onnx in" in capsys.readouterr().err
