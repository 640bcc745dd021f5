"""``autarch audit export`` and the standalone verifier, run with an interpreter that has no Autarch."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.cli.main import main
from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.bus import connect, ensure_event_stream
from autarch.runtime.chain import link as recorder_link
from autarch.runtime.relay import EventRelay
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.wire import WireEvents

from .stores import Store, demo_log

# The interpreter under the virtualenv: the standalone verifier must work where Autarch is not installed.
PYTHON = getattr(sys, "_base_executable", sys.executable)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def _repo_with_branch(root: Path) -> tuple[Path, str, list[str]]:
    repo = root / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "a@example.com")
    _git(repo, "config", "user.name", "A")
    (repo / "README.md").write_text("base\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "base")
    base = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "autarch/work")
    commits = []
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"{i}\n")
        _git(repo, "add", ".")
        _git(repo, "commit", "-q", "-m", f"pulse {i}")
        commits.append(_git(repo, "rev-parse", "HEAD"))
    _git(repo, "checkout", "-q", "main")
    return repo, base, commits


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Store, str, list[str]]:
    data = tmp_path / "data"
    data.mkdir()
    store = Store(Settings(data_dir=str(data)), "sqlite")
    repo, base, commits = _repo_with_branch(tmp_path)
    app = store.app()
    demo_log(app, workflows=1)  # a neighbour, not exported
    wf, _ = app.new_workflow(CreateWorkflow(workflow_id=str(uuid.uuid4()), title="t", request="r", repo=str(repo)))
    wf.take_note(session_id="s", note="plan", key="k")
    wf.execution_prepared(branch="autarch/work", worktree_path=str(repo), base_commit=base, repository_id="r")
    app.save(wf)
    app.close()
    return store, str(wf.id), commits


def _export(store: Store, workflow: str, out: Path) -> dict:
    assert main(["audit", "export", workflow, "--data-dir", str(store.settings.data_path), "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _check(bundle: Path) -> subprocess.CompletedProcess[str]:
    verifier = bundle.parent / "audit_verify.py"
    return subprocess.run([PYTHON, "-I", str(verifier), str(bundle)], capture_output=True, text=True, timeout=60,
                          cwd=bundle.parent)


def test_the_verifier_runs_where_autarch_is_not_installed():
    assert subprocess.run([PYTHON, "-I", "-c", "import autarch"], capture_output=True).returncode != 0


def test_an_exported_bundle_verifies_offline_with_the_branch_commits(recorded, tmp_path, capsys):
    store, workflow, commits = recorded
    out = tmp_path / "out" / "bundle.json"
    out.parent.mkdir()
    bundle = _export(store, workflow, out)
    assert [a["id"] for a in bundle["aggregates"]] == [workflow]
    assert [c["id"] for c in bundle["git"]["commits"]] == commits
    assert bundle["git"]["head"] == commits[-1]
    result = _check(out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"head: aggregate {workflow} version 3 link" in result.stdout
    assert "git: 3 commit(s) of branch autarch/work" in result.stdout
    # The same head line as the live system's verification prints.
    assert main(["audit", "verify", workflow, "--data-dir", str(store.settings.data_path), "--no-stream"]) == 0
    head = next(line for line in result.stdout.splitlines() if line.startswith("head:"))
    assert head in capsys.readouterr().out


@pytest.mark.parametrize("edit", ["event", "link", "removed event", "commit", "checkpoint"])
def test_an_edited_bundle_fails(recorded, tmp_path, edit):
    store, workflow, _ = recorded
    app = store.app()
    from autarch.runtime.chain import record_checkpoint

    record_checkpoint(app.recorder, app.recorder.max_notification_id())
    app.close()
    out = tmp_path / "bundle.json"
    bundle = _export(store, workflow, out)
    events = bundle["aggregates"][0]["events"]
    if edit == "event":
        state = base64.b64decode(events[1]["state"]).replace(b"plan", b"nalp")
        events[1]["state"] = base64.b64encode(state).decode()
    elif edit == "link":
        events[2]["digest"] = "00" * 32
    elif edit == "removed event":
        del events[2]
    elif edit == "commit":
        raw = base64.b64decode(bundle["git"]["commits"][1]["raw"]).replace(b"pulse 1", b"pulse X")
        bundle["git"]["commits"][1]["raw"] = base64.b64encode(raw).decode()
    else:
        bundle["checkpoints"][0]["payload"] = bundle["checkpoints"][0]["payload"].replace('"seq":1', '"seq":2')
    out.write_text(json.dumps(bundle))
    result = _check(out)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAILED" in result.stdout


def test_the_standalone_link_is_the_recorders(tmp_path):
    # Two copies of one computation (the verifier may import nothing of Autarch): they must agree.
    namespace: dict = {}
    exec(compile((Path(main.__code__.co_filename).parent / "audit_verify.py").read_text(), "audit_verify", "exec"),
         namespace)
    for args in [(bytes(32), str(uuid.uuid4()), 1, "m:T.Created", b"{}"),
                 (bytes(range(32)), "text-id", 12345, "\u00e9t\u00e9", b"\x00\xff" * 100)]:
        assert namespace["link"](*args) == recorder_link(*args)


def test_the_cli_names_an_edited_row_and_a_clean_published_log_passes(tmp_path, nats_server, capsys):
    data = tmp_path / "data"
    data.mkdir()
    store = Store(Settings(data_dir=str(data)), "sqlite")
    app = store.app()
    ids = demo_log(app, workflows=2)

    async def publish() -> None:
        nc = await connect(nats_server.url, name="audit-test")
        await ensure_event_stream(nc)
        try:
            relay = EventRelay(app=app, nc=nc, to_contract=WireEvents(app), checkpoint_interval=0)
            while await relay.publish_pending():
                pass
        finally:
            await nc.drain()

    asyncio.run(publish())
    app.close()
    argv = ["--data-dir", str(data), "--nats", nats_server.url]
    assert main(["audit", "verify", *argv]) == 0
    assert "OK" in capsys.readouterr().out
    store.set_state(ids[1], 4, store.state(ids[1], 4).replace(b"note 2", b"note 7"))
    assert main(["audit", "verify", *argv]) == 1
    out = capsys.readouterr().out
    assert f"edited: aggregate {ids[1]} version 4" in out
    assert f"differs_on_stream: aggregate {ids[1]} version 4" in out
    assert "TAMPERED" in out
    assert main(["audit", "verify", "--json", *argv]) == 1
    [report] = json.loads(capsys.readouterr().out)
    assert {(f["kind"], f["aggregate"], f["version"]) for f in report["findings"] if f["tampering"]} == {
        ("edited", ids[1], 4), ("differs_on_stream", ids[1], 4)}


def test_verify_says_what_it_could_not_check(recorded, capsys):
    store, workflow, _ = recorded
    data = str(store.settings.data_path)
    assert main(["audit", "verify", "not-an-id", "--data-dir", data, "--no-stream"]) == 2
    assert main(["audit", "verify", str(uuid.uuid4()), "--data-dir", data, "--no-stream"]) == 2
    err = capsys.readouterr().err
    assert "badly formed" in err and "no aggregate" in err
    # NATS away: the store is still checked and found fine, and the exit status says the stream was not.
    assert main(["audit", "verify", workflow, "--data-dir", data, "--nats", "nats://127.0.0.1:9"]) == 3
    captured = capsys.readouterr()
    assert "OK" in captured.out and "the stream was not checked" in captured.err
    assert main(["audit", "export", workflow, "--data-dir", str(store.settings.data_path / "nowhere")]) == 2
    assert "no orchestrator event store" in capsys.readouterr().err


def test_a_loop_session_exports_with_its_iterations_commits(tmp_path):
    from autarch.services.orchestrator.loop.model import LoopSession

    data = tmp_path / "data"
    data.mkdir()
    store = Store(Settings(data_dir=str(data)), "sqlite")
    repo, base, commits = _repo_with_branch(tmp_path)
    app = store.app()
    session = LoopSession(session_id=str(uuid.uuid4()), project_name="p", project_path=str(repo), goal="g",
                          max_iterations=3, anchor_turn_id=None, branch_name="autarch/work", base_branch="main",
                          context_strategy="prefetch", notify=[], created_by="api", script=None,
                          created_at="2026-11-27T19:00:00+00:00", max_tokens=None, max_cost_usd=None,
                          status="pending")
    session.branch_prepared(branch="autarch/work", worktree_path=str(tmp_path / "gone"), base_commit=base,
                            repository_id="r", at="2026-11-27T19:00:01+00:00")
    app.save(session)
    app.close()
    out = tmp_path / "loop.json"
    # The worktree is gone (removed when the session ended): the commits are read from the project.
    bundle = _export(store, str(session.id), out)
    assert [c["id"] for c in bundle["git"]["commits"]] == commits and bundle["git"]["base"] == base
    assert _check(out).returncode == 0


def test_verify_without_the_event_stream_checks_the_store_and_says_so(recorded, capsys, tmp_path):
    store, workflow, _ = recorded
    nats = EmbeddedNats(tmp_path / "bare-nats").start()  # a NATS whose JetStream has no AUTARCH_EVENTS yet
    try:
        assert main(["audit", "verify", workflow, "--data-dir", str(store.settings.data_path),
                     "--nats", nats.url]) == 3
    finally:
        nats.stop()
    captured = capsys.readouterr()
    assert "OK" in captured.out and "cannot read the stream AUTARCH_EVENTS" in captured.err


def test_a_workflow_before_its_branch_exports_without_commits(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    store = Store(Settings(data_dir=str(data)), "sqlite")
    app = store.app()
    [workflow] = demo_log(app, workflows=1)  # still scoping: no branch yet
    app.close()
    out = tmp_path / "early.json"
    assert "git" not in _export(store, workflow, out)
    assert _check(out).returncode == 0
