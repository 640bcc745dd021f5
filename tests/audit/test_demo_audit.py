"""The demo's whole log, written by every service, verifies; the one row a test edits is named; its bundle verifies."""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.cli.main import main
from tests.demo.test_demo import COMMITS, run_demo

from .test_bundle import PYTHON

pytestmark = pytest.mark.slow


def test_the_demo_log_verifies_and_an_edited_row_is_named(tmp_path: Path, capsys) -> None:
    repo = tmp_path / "demo"
    code, out, err, _ = run_demo(tmp_path, "--dir", str(repo), "--keep")
    assert code == 0, f"{out}\n{err}"
    [data] = (tmp_path / "tmp").glob("autarch-demo-data-*")
    # The demo's stream, as it left it: its own nats-server files, served again.
    nats = EmbeddedNats(data / "nats").start()
    try:
        argv = ["--data-dir", str(data), "--nats", nats.url]
        assert main(["audit", "verify", "--json", *argv]) == 0
        reports = {r["store"]: r for r in json.loads(capsys.readouterr().out)}
        orchestrator, runner = reports["orchestrator"], reports["agent_runner"]
        assert orchestrator["ok"] and runner["ok"]
        assert orchestrator["events"] == orchestrator["chained"] > 20
        assert orchestrator["stream_messages"] > 20 and orchestrator["checkpoints"] >= 1
        assert runner["events"] == runner["chained"] > 0 and runner["stream_messages"] > 0
        assert not [f for r in reports.values() for f in r["findings"] if f["kind"] != "unpublished"]

        db = data / "orchestrator" / "events.sqlite"
        with sqlite3.connect(db) as conn:
            [(workflow,)] = conn.execute("SELECT originator_id FROM stored_events WHERE topic LIKE "
                                         "'%Workflow.Created'").fetchall()
        workflow = str(uuid.UUID(workflow))

        bundle = tmp_path / "bundle" / "demo.json"
        bundle.parent.mkdir()
        assert main(["audit", "export", workflow, "--data-dir", str(data), "-o", str(bundle)]) == 0
        capsys.readouterr()
        exported = json.loads(bundle.read_text())
        # Oldest first in the bundle; COMMITS is git log's order, newest first.
        assert [_subject(c) for c in exported["git"]["commits"]] == COMMITS[::-1]
        checked = subprocess.run([PYTHON, "-I", str(bundle.parent / "audit_verify.py"), str(bundle)],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stdout + checked.stderr

        with sqlite3.connect(db) as conn:  # one row edited behind the store's back
            [(state,)] = conn.execute("SELECT state FROM stored_events WHERE originator_id=? AND originator_version=3",
                                      (uuid.UUID(workflow).hex,)).fetchall()
            edited = state.replace(b'"', b"'", 1) if b"scoping" not in state else state.replace(b"scoping", b"scopinG")
            assert edited != state
            conn.execute("UPDATE stored_events SET state=? WHERE originator_id=? AND originator_version=3",
                         (edited, uuid.UUID(workflow).hex))
        assert main(["audit", "verify", *argv]) == 1
        printed = capsys.readouterr().out
        assert f"edited: aggregate {workflow} version 3" in printed
        tampered = [line for line in printed.splitlines() if line.startswith("  ") and ": aggregate " in line
                    and not line.strip().startswith(("unpublished", "head:"))]
        assert all(f"aggregate {workflow} version 3" in line for line in tampered), tampered
    finally:
        nats.stop()


def _subject(commit: dict) -> str:
    return base64.b64decode(commit["raw"]).decode().split("\n\n", 1)[1].strip().splitlines()[0]
