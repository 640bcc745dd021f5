"""Tools whose effect belongs to another service: seed 004's validation errors, then a typed command over NATS.

The orchestrator, git and indexer are played by small stand-ins on the real nats-server that
record what they receive and answer with the owners' contracts (or ``not_found``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from autarch.contracts import git, indexer
from autarch.contracts import orchestrator_tools as fx
from autarch.runtime.errors import ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.services.tools.service import build_executor

from .helpers import Tools

WORKFLOW = "wf-1"


@dataclass
class StandIns:
    """What the stand-in owners received, and what they know."""

    received: list[Any] = field(default_factory=list)
    review_card: bool = True
    diff: str | None = None
    indexed: bool = True
    hits: list[indexer.SearchResult] = field(default_factory=list)


@pytest.fixture
async def owners(nc) -> AsyncIterator[StandIns]:
    state = StandIns()

    async def take_note(cmd: fx.TakeNote) -> fx.NoteTaken:
        state.received.append(cmd)
        return fx.NoteTaken(note_id="n1")

    async def record_baseline(cmd: fx.RecordBaseline) -> fx.BaselineRecorded:
        state.received.append(cmd)
        return fx.BaselineRecorded(baseline_id="b-42")

    async def add_comment(cmd: fx.AddReviewComment) -> fx.ReviewCommentAdded:
        state.received.append(cmd)
        if not state.review_card:
            raise ServiceFailure.not_found("no review card")
        return fx.ReviewCommentAdded(comment_id=f"c-{len(state.received)}")

    async def complete(cmd: fx.CompleteReview) -> fx.ReviewCompleted:
        state.received.append(cmd)
        if not state.review_card:
            raise ServiceFailure.not_found("no review card")
        return fx.ReviewCompleted(recommendation=cmd.recommendation)

    async def scope(query: fx.GetScopeCard) -> fx.ScopeCard:
        if query.workflow_id != WORKFLOW:
            raise ServiceFailure.not_found("no scope card")
        return fx.ScopeCard(title="Auth", description="JWT", in_scope=["login"], out_of_scope=["oauth"], constraints=[])

    async def workflow_diff(query: git.WorkflowDiff) -> git.DiffArtifactRef:
        if state.diff is None:
            raise ServiceFailure.not_found("no diff")
        return git.DiffArtifactRef(
            artifact_id="a" * 32, kind="workflow", run_id=query.run_id, from_commit="x", to_commit="y",
            files_changed=1, insertions=1, deletions=0, size=len(state.diff),
        )  # fmt: skip

    async def diff_page(query: git.GetDiffArtifact) -> git.DiffArtifact:
        ref = await workflow_diff(git.WorkflowDiff(run_id=WORKFLOW))
        assert state.diff is not None
        page = state.diff[query.offset : query.offset + 10]  # tiny pages: the tool must follow next_offset
        end = query.offset + len(page)
        return git.DiffArtifact(
            ref=ref, diff=page, offset=query.offset, next_offset=end if end < len(state.diff) else None
        )

    async def search(query: indexer.SemanticSearch) -> indexer.SearchResults:
        state.received.append(query)
        if not state.indexed:
            raise ServiceFailure(indexer.IndexerErrorCode.NOT_INDEXED, indexer.NOT_INDEXED_MESSAGE)
        return indexer.SearchResults(results=state.hits, project="p", scope="project")

    services = []
    orchestrator = TypedService(nc, name="orchestrator")
    orchestrator.endpoint("take_note", fx.TakeNote, take_note)
    orchestrator.endpoint("record_baseline", fx.RecordBaseline, record_baseline)
    orchestrator.endpoint("add_review_comment", fx.AddReviewComment, add_comment)
    orchestrator.endpoint("complete_review", fx.CompleteReview, complete)
    orchestrator.endpoint("get_scope_card", fx.GetScopeCard, scope)
    git_service = TypedService(nc, name="git")
    git_service.endpoint("workflow_diff", git.WorkflowDiff, workflow_diff)
    git_service.endpoint("get_diff_artifact", git.GetDiffArtifact, diff_page)
    index = TypedService(nc, name="indexer")
    index.endpoint("semantic_search", indexer.SemanticSearch, search)
    for service in (orchestrator, git_service, index):
        await service.start()
        services.append(service)
    yield state
    for service in services:
        await service.stop()


async def test_take_note(nats_tools, owners):
    tools = nats_tools
    assert await tools("take_note", {"note": "x"}) == {
        "success": False,
        "error": "Notes are only available in workflow channels",
    }
    assert await tools("take_note", {"note": "  "}, workflow_id=WORKFLOW) == {
        "success": False,
        "error": "Note content cannot be empty",
    }
    assert await tools("take_note", {"note": "remember"}, workflow_id=WORKFLOW, call_id="t1") == {"success": True}
    (note,) = owners.received
    assert isinstance(note, fx.TakeNote) and note.note == "remember" and note.idempotency_key == "session-1:t1"


async def test_record_baseline(nats_tools, owners):
    tools = nats_tools
    base = {"source": "Build", "pattern": "CS0618: 'Foo' is obsolete"}
    assert await tools("record_baseline", {**base, "issueType": "Info"}, role="preflight", workflow_id=WORKFLOW) == {
        "success": False,
        "error": "Invalid issueType 'Info'. Must be 'Error' or 'Warning'.",
    }
    bad_source = {**base, "issueType": "Error", "source": "Compile"}
    assert await tools("record_baseline", bad_source, role="preflight", workflow_id=WORKFLOW) == {
        "success": False,
        "error": "Invalid source 'Compile'. Must be 'Build', 'Lint', or 'Test'.",
    }
    ok = await tools(
        "record_baseline",
        {**base, "issueType": "Warning", "filePath": "src/Legacy.cs"},
        role="preflight",
        workflow_id=WORKFLOW,
    )
    assert ok == {
        "success": True,
        "baselineId": "b-42",
        "message": "Recorded Warning baseline from Build: CS0618: 'Foo' is obsolete",
    }
    (baseline,) = owners.received
    assert baseline.issue_type == "Warning" and baseline.file_path == "src/Legacy.cs"


async def test_line_comment_errors_and_success(nats_tools, owners):
    tools = nats_tools
    good = {"file_path": "a.py", "start_line": 3, "severity": "High", "category": "bug", "description": "off by one"}

    async def comment(**changes):
        return await tools("add_line_comment", {**good, **changes}, role="review", workflow_id=WORKFLOW)

    assert await comment(severity="Critical") == {
        "success": False,
        "error": "Invalid severity 'Critical'. Must be High, Medium, or Low.",
    }
    assert await comment(file_path="") == {"success": False, "error": "file_path is required for line comments"}
    assert await comment(start_line=0) == {"success": False, "error": "start_line must be a positive integer"}
    assert await comment(end_line=2) == {
        "success": False,
        "error": "end_line must be greater than or equal to start_line",
    }
    assert owners.received == []
    ok = await comment(end_line=5)
    assert ok["success"] is True and ok["message"] == "Line comment added successfully" and ok["comment_id"]
    assert owners.received[0].kind == "line" and owners.received[0].end_line == 5
    owners.review_card = False
    assert await comment() == {"success": False, "error": "Review card not found"}


async def test_file_and_review_comments(nats_tools, owners):
    tools = nats_tools
    common = {"severity": "low", "category": "style", "description": "naming"}
    assert await tools(
        "add_file_comment", {**common, "severity": "Critical", "file_path": "a"}, role="review", workflow_id=WORKFLOW
    ) == {
        "success": False,
        "error": "Invalid severity 'Critical'. Must be High, Medium, or Low.",
    }
    assert await tools("add_file_comment", {**common, "file_path": " "}, role="review", workflow_id=WORKFLOW) == {
        "success": False,
        "error": "file_path is required for file comments",
    }
    ok = await tools("add_file_comment", {**common, "file_path": "a.py"}, role="review", workflow_id=WORKFLOW)
    assert ok["success"] is True and ok["message"] == "File comment added successfully"
    assert owners.received[-1].severity == "Low"
    assert await tools(
        "add_review_comment", {**common, "severity": "Critical"}, role="review", workflow_id=WORKFLOW
    ) == {
        "success": False,
        "error": "Invalid severity 'Critical'. Must be High, Medium, or Low.",
    }
    ok = await tools("add_review_comment", common, role="review", workflow_id=WORKFLOW)
    assert ok["success"] is True and ok["message"] == "Review comment added successfully"
    owners.review_card = False
    for tool, extra in (("add_file_comment", {"file_path": "a.py"}), ("add_review_comment", {})):
        assert await tools(tool, {**common, **extra}, role="review", workflow_id=WORKFLOW) == {
            "success": False,
            "error": "Review card not found",
        }
    assert await tools("add_review_comment", common, role="review") == {
        "success": False,
        "error": "Review card not found",
    }


async def test_complete_review(nats_tools, owners):
    tools = nats_tools
    assert await tools(
        "complete_review", {"recommendation": "pass", "summary": "ok"}, role="review", workflow_id=WORKFLOW
    ) == {
        "success": False,
        "error": "Invalid recommendation 'pass'. Must be one of: approve, reject, manual_review.",
    }
    assert await tools(
        "complete_review", {"recommendation": "approve", "summary": " "}, role="review", workflow_id=WORKFLOW
    ) == {
        "success": False,
        "error": "Summary is required.",
    }
    ok = await tools(
        "complete_review", {"recommendation": "approve", "summary": "good"}, role="review", workflow_id=WORKFLOW
    )
    assert ok == {"success": True, "recommendation": "approve", "message": "Review completed successfully"}
    owners.review_card = False
    assert await tools(
        "complete_review", {"recommendation": "reject", "summary": "bad"}, role="review", workflow_id=WORKFLOW
    ) == {
        "success": False,
        "error": "Review card not found",
    }


async def test_get_diff(nats_tools, owners):
    tools = nats_tools
    assert await tools("get_diff", role="review") == {"error": "Diff artifact not found"}
    assert await tools("get_diff", role="review", workflow_id=WORKFLOW) == {"error": "Diff artifact not found"}
    owners.diff = "diff --git a/app.py b/app.py\n+print('hi')\ndiff --git a/.env b/.env\n+TOKEN=abc123456789\n"
    value = await tools("get_diff", role="review", workflow_id=WORKFLOW)
    assert value["success"] is True
    assert value["diff"].startswith("diff --git a/app.py b/app.py\n+print('hi')\n")
    assert "abc123456789" not in value["diff"] and "[blocked]" in value["diff"]


async def test_get_scope_card(nats_tools, owners):
    tools = nats_tools
    assert await tools("get_scope_card", role="review") == {"error": "Scope card not found"}
    assert await tools("get_scope_card", role="review", workflow_id="other") == {"error": "Scope card not found"}
    assert await tools("get_scope_card", role="review", workflow_id=WORKFLOW) == {
        "success": True,
        "title": "Auth",
        "description": "JWT",
        "in_scope": ["login"],
        "out_of_scope": ["oauth"],
        "constraints": [],
    }


async def test_semantic_search(nats_tools, owners):
    tools = nats_tools
    owners.indexed = False
    assert await tools("semantic_search", {"query": "auth"}) == {"error": "Project has not been indexed yet."}
    owners.indexed = True
    owners.hits = [
        indexer.SearchResult(
            file_path="src/a.ts",
            start_line=1,
            end_line=5,
            snippet="const k = 'AKIAQX7RZ2MEXAMPLEKY';",
            score=0.9,
            adjusted_score=1.35,
        ),
        indexer.SearchResult(file_path=".env", start_line=1, end_line=1, snippet="X=1", score=0.8, adjusted_score=0.8),
    ]
    value = await tools("semantic_search", {"query": "auth", "patternWeights": ["**/*.ts:1.5"], "maxResults": 5})
    assert value == [
        {
            "file_path": "src/a.ts",
            "start_line": 1,
            "end_line": 5,
            "snippet": "const k = '[blocked]';",
            "score": 0.9,
            "adjusted_score": 1.35,
        }
    ]
    query = owners.received[-1]
    assert query.pattern_weights == ["**/*.ts:1.5"] and query.max_results == 5 and query.query == "auth"


async def test_without_owners_the_model_gets_a_readable_error(nats_tools):
    tools = nats_tools
    assert await tools("semantic_search", {"query": "auth"}) == {"error": "Project has not been indexed yet."}
    note = await tools("take_note", {"note": "x"}, workflow_id=WORKFLOW)
    assert note["success"] is False and note["error"].startswith("Could not store the note: the service")
    diff = await tools("get_diff", role="review", workflow_id=WORKFLOW)
    assert diff["success"] is False and "did not answer" in diff["error"]
    scope = await tools("get_scope_card", role="review", workflow_id=WORKFLOW)
    assert scope["success"] is False and "did not answer" in scope["error"]


async def test_a_restarting_owner_is_waited_for_and_an_absent_indexer_is_not(nc, tool_settings, worktree):
    """The orchestrator answering a moment late (a restart) does not fail the agent's call; the optional indexer's
    absence is answered at once."""
    executor = build_executor(msgspec.structs.replace(tool_settings, restart_grace=30.0), nc=nc, grep_workers=0)
    tools = Tools(executor, worktree)
    received: list[fx.TakeNote] = []

    async def take_note(cmd: fx.TakeNote) -> fx.NoteTaken:
        received.append(cmd)
        return fx.NoteTaken(note_id="n1")

    async def come_back() -> TypedService:
        await asyncio.sleep(1.0)
        orchestrator = TypedService(nc, name="orchestrator")
        orchestrator.endpoint("take_note", fx.TakeNote, take_note)
        await orchestrator.start()
        return orchestrator

    try:
        restarted = asyncio.create_task(come_back())
        assert await tools("take_note", {"note": "kept across the restart"}, workflow_id=WORKFLOW) == {"success": True}
        assert [c.note for c in received] == ["kept across the restart"]
        started = time.monotonic()
        assert await tools("semantic_search", {"query": "auth"}) == {"error": "Project has not been indexed yet."}
        assert time.monotonic() - started < 15.0  # not the 30 s grace: nobody waits for an optional service
        await (await restarted).stop()
    finally:
        executor.close()
