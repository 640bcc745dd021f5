"""``autarch watch``'s rendering: a line for every event type, built from the real event contracts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from autarch.cli.render import (
    Progress,
    SseComment,
    SseMessage,
    Watch,
    card_summary,
    halt_hint,
    parse_sse,
    render_event,
    short_input,
)
from autarch.contracts import events as ev
from autarch.contracts.agents import TurnDelta
from autarch.contracts.workflows import FixPulseView

WF = "99f31dc9-0000-4000-8000-000000000001"
SID = "5e55105e-0000-4000-8000-000000000002"
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
COMMON: dict[str, Any] = {"workflow_id": WF, "occurred_at": AT}
LOOP: dict[str, Any] = {"session_id": WF, "occurred_at": AT}
RUN: dict[str, Any] = {"run_id": WF, "occurred_at": AT}
TURN: dict[str, Any] = {**RUN, "session_id": SID, "turn_id": "t-1"}

SCOPE = {"title": "JWT", "description": "d", "in_scope": ["a", "b"], "out_of_scope": ["c"],
         "recommended_path": "full"}
RESEARCH = {"summary": "Auth lives in api/mw.py.\nMore detail.", "keyFiles": [{"path": "a", "purpose": "b"}],
            "recommendations": []}
PLAN = {"approachSummary": "Two steps", "pulses": [{"id": "pulse-1"}, {"id": "pulse-2"}]}

SAMPLES: dict[str, tuple[ev.Event, list[str]]] = {
    "workflow:created": (ev.WorkflowCreated(**COMMON, title="JWT", request="add", repo="/r", base_branch="main"),
                         ["created “JWT” on /r (base main)"]),
    "workflow:error": (ev.WorkflowError(**COMMON, stage="research", message="boom"), ["ERROR in research: boom"]),
    "workflow:approval_needed": (
        ev.WorkflowApprovalNeeded(**COMMON, stage="scoping", artifact=SCOPE),
        ["APPROVAL NEEDED — scope “JWT”: 2 in scope, 1 out; recommends full",
         f"→ autarch workflow approve {WF} [--path quick|full]", f"request-changes {WF} FEEDBACK"]),
    "workflow:stage_changed": (ev.WorkflowStageChanged(**COMMON, from_stage="scoping", to_stage="execution",
                                                       path="quick"),
                               ["stage scoping → execution (path quick)"]),
    "workflow:completed": (ev.WorkflowCompleted(**COMMON, recommendation="approve"),
                           ["workflow completed (review recommended approve)"]),
    "workflow:changes_requested": (ev.WorkflowChangesRequested(**COMMON, stage="planning", feedback="smaller"),
                                   ["changes requested for planning: smaller"]),
    "workflow:fix_round_opened": (
        ev.WorkflowFixRoundOpened(**COMMON, round=1, feedback="keep the API", comment_ids=["c1", "c2", "c3"],
                                  pulses=[FixPulseView(pulse_id="fix-1-1", title="t", file_path="api/mw.py",
                                                       comment_ids=["c1", "c2"]),
                                          FixPulseView(pulse_id="fix-1-2", title="t", comment_ids=["c3"])]),
        ["review sent back (fix round 1): 3 comments → 2 fix pulses: fix-1-1 (api/mw.py), fix-1-2 (no file)"]),
    "workflow:note_taken": (ev.WorkflowNoteTaken(**COMMON, note_id="n", stage="research", session_id=SID,
                                                 note="mw is old"), ["note (research): mw is old"]),
    "workflow:baseline_recorded": (ev.WorkflowBaselineRecorded(**COMMON, baseline_id="b", issue_type="Warning",
                                                               source="Lint", pattern="unused import"),
                                   ["baseline (Lint Warning): unused import"]),
    "workflow:review_comment_added": (
        ev.WorkflowReviewCommentAdded(**COMMON, comment_id="c", kind="line", severity="High", category="security",
                                      description="no expiry check", file_path="api/mw.py", start_line=3,
                                      end_line=5),
        ["review comment [High security] api/mw.py:3-5: no expiry check"]),
    "workflow:session_assigned": (ev.WorkflowSessionAssigned(**COMMON, step="research", session_id=SID,
                                                             role="research"),
                                  ["session 5e55105e assigned to research (research)"]),
    "workflow:halted": (
        ev.WorkflowHalted(**COMMON, stage="scoping", reason="questions", message="the agent asks questions",
                          details={"questions": [{"type": "single_select", "prompt": "Which DB?",
                                                  "options": ["pg", "sqlite"]},
                                                 {"type": "free_text", "prompt": "Why?"}]}),
        ["HALTED (questions): the agent asks questions", "1. Which DB? [pg / sqlite] (single_select)",
         "2. Why?", f"→ autarch workflow answer {WF} ANSWER..."]),
    "workflow:resumed": (ev.WorkflowResumed(**COMMON, stage="execution", reason="stopped", message="go on"),
                         ["resumed (stopped): go on"]),
    "workflow:abandoned": (ev.WorkflowAbandoned(**COMMON, stage="execution", reason="preflight failed: no build"),
                           ["ABANDONED in execution: preflight failed: no build"]),
    "preflight:started": (ev.PreflightStarted(**COMMON, branch="autarch/99f31dc9", worktree_path="/w",
                                              base_commit="0123456789abcdef"),
                          ["preflight started: branch autarch/99f31dc9 from 01234567 (worktree /w)"]),
    "preflight:completed": (ev.PreflightCompleted(**COMMON, status="completed", summary="deps installed",
                                                  build_success=True, baselines_recorded=2),
                            ["preflight completed: deps installed; build ok; 2 baselines"]),
    "pulse:started": (ev.PulseStarted(**COMMON, pulse_id="pulse-1-a2", planned_pulse_id="pulse-1", attempt=2,
                                      title="middleware", pulse_branch="b", base_commit="c"),
                      ["pulse pulse-1-a2 started (attempt 2): middleware"]),
    "pulse:completion_rejected": (ev.PulseCompletionRejected(**COMMON, pulse_id="pulse-1", rejections=2,
                                                             failures=["shell: pytest exited 1"], escape_hatch=True),
                                  ["pulse pulse-1: completion rejected #2 (told about unresolvedIssues): "
                                   "shell: pytest exited 1"]),
    "pulse:completed": (ev.PulseCompleted(**COMMON, pulse_id="pulse-1", status="succeeded",
                                          commit="abcdef0123456789", description="feat(api): validate JWTs\n\nbody"),
                        ["pulse pulse-1 succeeded: commit abcdef01 — feat(api): validate JWTs"]),
    "session:started": (ev.SessionStarted(**RUN, session_id=SID, role="research", model="claude-x", root="/w"),
                        ["[session 5e55105e] session started (research, claude-x)"]),
    "session:completed": (ev.SessionCompleted(**RUN, session_id=SID, reason="done"),
                          ["[session 5e55105e] session closed: done"]),
    "session:error": (ev.SessionError(**RUN, session_id=SID, message="model API refused"),
                      ["[session 5e55105e] session ERROR: model API refused"]),
    "turn:started": (ev.TurnStarted(**TURN, index=1, text="please also test it"),
                     ["[session 5e55105e] message: please also test it"]),
    "turn:tool_started": (ev.TurnToolStarted(**TURN, tool_use_id="u", tool="read_file",
                                             input={"reason": "see it", "path": "api/mw.py"}),
                          ["[session 5e55105e] read_file path=api/mw.py reason=see it"]),
    "turn:tool_completed": (ev.TurnToolCompleted(**TURN, tool_use_id="u", tool="shell", output="exit 1\nmore",
                                                 is_error=True, duration_ms=3.0),
                            ["[session 5e55105e] shell failed: exit 1"]),
    "turn:completed": (ev.TurnCompleted(**TURN, text="t", thoughts="", outcome="block", tool="submit_research",
                                        input_tokens=1000, output_tokens=200, cache_read_input_tokens=500,
                                        cost_usd=0.0123, tool_calls=3),
                       ["[session 5e55105e] turn done (block submit_research): 1,500 in / 200 out tokens, "
                        "$0.0123, 3 tool calls"]),
    "loop:started": (ev.LoopStarted(**LOOP, project_name="shop", project_path="/r", goal="Add auth",
                                    max_iterations=10, branch_name="autarch/loop-99f31dc9", created_by="cli",
                                    context_strategy="prefetch"),
                     ["loop started on /r (branch autarch/loop-99f31dc9, at most 10 iterations): Add auth"]),
    "loop:iteration_started": (ev.LoopIterationStarted(**LOOP, iteration_number=3, max_iterations=10,
                                                       agent_session_id=SID, anchor_strategy="chained"),
                               ["iteration 3/10 started (anchor: chained)"]),
    "loop:iteration_completed": (ev.LoopIterationCompleted(**LOOP, iteration_number=3, max_iterations=10,
                                                           status="complete", signal="CONTINUE",
                                                           signal_source="explicit",
                                                           output_summary="Built login component",
                                                           commit_hash="a1b2c3d4e5f6"),
                                 ["iteration 3/10 CONTINUE · a1b2c3d4 · Built login component"]),
    "loop:paused": (ev.LoopPaused(**LOOP, iteration_number=2), ["loop paused after iteration 2"]),
    "loop:resumed": (ev.LoopResumed(**LOOP, message="key is set"), ["loop resumed: key is set"]),
    "loop:blocked": (ev.LoopBlocked(**LOOP, reason="Need API key for Stripe integration", iteration_number=4),
                     ["loop BLOCKED: Need API key for Stripe integration"]),
    "loop:completed": (ev.LoopCompleted(**LOOP, reason="the agent signalled COMPLETE", iterations=5, commits=3),
                       ["loop complete (5 iterations, 3 commits): the agent signalled COMPLETE"]),
    "loop:failed": (ev.LoopFailed(**LOOP, reason="no branch"), ["loop FAILED: no branch"]),
    "loop:aborted": (ev.LoopAborted(**LOOP, reason="changed my mind", iteration_number=2),
                     ["loop aborted: changed my mind"]),
}


def wire(event: ev.Event) -> dict[str, Any]:
    """The event as the SSE ``data`` carries it (JSON, decoded)."""
    return msgspec.json.decode(msgspec.json.encode(event))


def test_every_event_type_has_a_sample():
    # The swarm's events have theirs in test_swarm_render.py (from the contract fixtures).
    assert set(SAMPLES) == set(ev.EVENT_TYPES) - {t.__struct_config__.tag for t in (*ev.SWARM_EVENTS,
                                                                                     *ev.MAIL_EVENTS)}


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_each_event_renders_a_readable_line(kind: str):
    event, expected = SAMPLES[kind]
    line = render_event(wire(event))
    assert line is not None
    assert line[:8].count(":") == 2 and line[8:10] == "  "  # HH:MM:SS, local time
    for part in expected:
        assert part in line, (part, line)


def test_quiet_events_render_nothing():
    assert render_event(wire(ev.TurnStarted(**TURN, index=0, text="the kickoff"))) is None
    ok = ev.TurnToolCompleted(**TURN, tool_use_id="u", tool="read_file", output="x", is_error=False, duration_ms=1)
    assert render_event(wire(ok)) is None


def test_variants():
    def line(event: ev.Event) -> str:
        rendered = render_event(wire(event))
        assert rendered is not None
        return rendered

    assert "preflight FAILED: no python" in line(ev.PreflightCompleted(**COMMON, status="failed", error="no python"))
    assert "build FAILING" in line(ev.PreflightCompleted(**COMMON, status="completed", build_success=False))
    assert line(ev.PulseCompleted(**COMMON, pulse_id="p", status="failed", commit="feedface00",
                                  failure_reason="iteration limit")).endswith(
        "pulse p FAILED (recovery checkpoint feedface): iteration limit")
    assert line(ev.PulseCompleted(**COMMON, pulse_id="p", status="stopped")).endswith("pulse p stopped")
    assert "(1 unresolved issue)" in line(ev.PulseCompleted(
        **COMMON, pulse_id="p", status="succeeded", commit="c", description="fix: x", has_unresolved_issues=True,
        unresolved_issues=[{"issue": "a", "reason": "b"}]))
    assert line(ev.WorkflowCompleted(**COMMON)).endswith("workflow completed")
    assert line(ev.WorkflowStageChanged(**COMMON, from_stage="research", to_stage="planning")).endswith(
        "stage research → planning")
    for reason, command in (("extension_requested", "approve-extension"), ("stopped", "resume"),
                            ("pulse_failed", "resume"), ("unresolved_issues", "resume"), ("error", "resume")):
        rendered = line(ev.WorkflowHalted(**COMMON, stage="execution", reason=reason, message="m",
                                          pulse_id="pulse-1"))
        assert f"HALTED ({reason}) in pulse-1: m" in rendered and f"autarch workflow {command} {WF}" in rendered
    assert line(ev.WorkflowReviewCommentAdded(**COMMON, comment_id="c", kind="review", severity="Low",
                                              category="tests", description="more")).endswith(
        "review comment [Low tests] (whole change): more")
    turn = line(ev.TurnCompleted(**TURN, text="", thoughts="", outcome="error", detail="model API: 500",
                                 tool_calls=1))
    assert "turn done (error: model API: 500): 0 in / 0 out tokens, $0.0000, 1 tool call" in turn
    assert "(cancelled)" in line(ev.TurnCompleted(**TURN, text="", thoughts="", outcome="cancelled"))
    # An event type this version does not know still shows up, by name.
    assert render_event({"type": "workflow:teleported", "occurred_at": "2026-01-02T03:04:05Z"}).endswith(
        "workflow:teleported")
    assert render_event({"type": "widget:spun"}).endswith("widget:spun")
    assert render_event({}).endswith("(event without a type)")


def test_card_summaries():
    assert card_summary("research", RESEARCH) == "research: Auth lives in api/mw.py. (1 key file)"
    assert card_summary("planning", PLAN) == "plan: Two steps (2 pulses: pulse-1, pulse-2)"
    assert card_summary("review", {"recommendation": "approve", "summary": "fine"}) == \
        "review: recommends approve — fine"
    assert card_summary("review", {"recommendation": "reject"}) == "review: recommends reject"
    assert card_summary("other", {}) == "other card"


def test_short_input_puts_the_telling_arguments_first_and_stays_short():
    assert short_input({"reason": "r", "command": "pytest -q"}) == "command=pytest -q reason=r"
    assert short_input({"path": "a.py", "old_str": "x\ny", "new_str": "z"}) == "path=a.py old_str=x y new_str=z"
    assert short_input({"limit": 5, "flags": ["a"]}) == 'limit=5 flags=["a"]'
    long = short_input({"path": "p" * 200})
    assert len(long) <= 70 and long.endswith("…")
    assert short_input({}) == "" and short_input(None) == ""


def test_halt_hints():
    assert halt_hint("w", "questions") == "autarch workflow answer w ANSWER..."
    assert halt_hint("w", "extension_requested") == "autarch workflow approve-extension w"
    assert halt_hint("w", "stopped") == "autarch workflow resume w [--message TEXT]"
    assert halt_hint("w", "disk_full") == (
        "goes on by itself once the path has room again (or: autarch workflow resume w)")


def test_watch_labels_sessions_by_step_and_keeps_totals():
    watch = Watch()
    assert "assigned to pulse:pulse-1" in (watch.feed(wire(ev.WorkflowSessionAssigned(
        **COMMON, step="pulse:pulse-1", session_id=SID, role="pulsing"))) or "")
    tool = watch.feed(wire(ev.TurnToolStarted(**TURN, tool_use_id="u", tool="shell", input={"command": "ls"})))
    assert tool is not None and tool.endswith("[pulse:pulse-1] shell command=ls")
    done = dict(text="", thoughts="", outcome="end_turn", input_tokens=100, output_tokens=50,
                cache_creation_input_tokens=10, cost_usd=0.5)
    first = watch.feed(wire(ev.TurnCompleted(**TURN, **done)))
    assert first is not None and first.endswith("[total 160 tokens, $0.5000]")
    second = watch.feed(wire(ev.TurnCompleted(**{**TURN, "session_id": "other-session"}, **done)))
    assert second is not None and "[session other-se]" in second and second.endswith("[total 320 tokens, $1.0000]")
    assert (watch.turns, watch.tokens, watch.total()) == (2, 320, "320 tokens, $1.0000")
    assert watch.feed(wire(ev.TurnStarted(**TURN, index=0, text="kickoff"))) is None


def test_the_sse_parser_follows_the_spec():
    lines = [
        ": connected", "",
        "id: 1", "event: workflow:created", 'data: {"a":1}', "",
        "id: 2", "event: x", "data: line one", "data:line two", "",
        "event: nothing-without-data", "",
        ": keep-alive",
        "retry: 1000", "unknown: field", "data: no event name", "",
        "id: 3", "event: cut", "data: never dispatched",
    ]
    assert list(parse_sse(lines)) == [
        SseComment("connected"),
        SseMessage(event="workflow:created", data='{"a":1}', id="1"),
        SseMessage(event="x", data="line one\nline two", id="2"),
        SseComment("keep-alive"),
        SseMessage(event="message", data="no event name", id="2"),
    ]
    assert list(parse_sse(["data: a\r\n", "\r\n"])) == [SseMessage(event="message", data="a")]


# --- progress -------------------------------------------------------------------------------------------

PLAN3 = {"approachSummary": "three", "pulses": [{"id": "pulse-1", "title": "middleware"},
                                                 {"id": "pulse-2", "title": "tests"},
                                                 {"id": "pulse-3", "title": "docs"}]}


def fed(watch: Watch, event: ev.Event) -> str:
    line = watch.feed(wire(event))
    assert line is not None
    return line


def started(run: str, planned: str, title: str, attempt: int = 1) -> ev.PulseStarted:
    return ev.PulseStarted(**COMMON, pulse_id=run, planned_pulse_id=planned, attempt=attempt, title=title,
                           pulse_branch="b", base_commit="c")


def succeeded(run: str) -> ev.PulseCompleted:
    return ev.PulseCompleted(**COMMON, pulse_id=run, status="succeeded", commit="abc", description="feat: x")


def test_progress_counts_the_stages_and_the_planned_pulses():
    watch = Watch()
    fed(watch, ev.WorkflowCreated(**COMMON, title="JWT", request="add", repo="/r", base_branch="main"))
    assert watch.progress.summary() == "scoping (stage 1/5)"
    research = fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="scoping", to_stage="research", path="full"))
    assert research.endswith("stage scoping → research (path full)  [stage 2/5]")
    fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="research", to_stage="planning"))
    # A first plan, sent back, and the revised one: the last plan counts.
    fed(watch, ev.WorkflowApprovalNeeded(**COMMON, stage="planning", artifact=PLAN))
    fed(watch, ev.WorkflowApprovalNeeded(**COMMON, stage="planning", artifact=PLAN3))
    assert fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="planning", to_stage="execution")).endswith(
        "[stage 4/5]")
    assert fed(watch, started("pulse-1", "pulse-1", "middleware")).endswith(
        "pulse pulse-1 started: middleware  [pulse 1/3]")
    assert watch.progress.summary() == "execution (stage 4/5), pulse 1/3 “middleware”"
    assert fed(watch, succeeded("pulse-1")).endswith("[1/3 pulses done]")
    fed(watch, started("pulse-2", "pulse-2", "tests"))
    failed = fed(watch, ev.PulseCompleted(**COMMON, pulse_id="pulse-2", status="failed", failure_reason="limit"))
    assert "pulses done" not in failed
    # A retry is the same planned pulse: still 2 of 3.
    assert fed(watch, started("pulse-2-a2", "pulse-2", "tests", attempt=2)).endswith("(attempt 2): tests  [pulse 2/3]")
    assert fed(watch, succeeded("pulse-2-a2")).endswith("[2/3 pulses done]")
    fed(watch, started("pulse-3", "pulse-3", "docs"))
    fed(watch, succeeded("pulse-3"))
    assert fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="execution", to_stage="review")).endswith(
        "[stage 5/5]")
    assert watch.progress.summary() == "review (stage 5/5)"
    # Done is past the five stages: no count.
    assert fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="review", to_stage="done")).endswith(
        "stage review → done")


def test_the_quick_path_runs_one_pulse_named_after_the_scope():
    watch = Watch()
    fed(watch, ev.WorkflowApprovalNeeded(**COMMON, stage="scoping", artifact=SCOPE))
    assert fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="scoping", to_stage="execution",
                                              path="quick")).endswith("[stage 4/5]")
    assert fed(watch, started("pulse-1", "pulse-1", "JWT")).endswith("[pulse 1/1]")
    assert watch.progress.summary() == "execution (stage 4/5), pulse 1/1 “JWT”"


def test_without_a_known_plan_pulses_are_not_counted():
    """Joined mid-execution with nothing known: no made-up numbers."""
    watch = Watch()
    assert fed(watch, started("pulse-2", "pulse-2", "tests")).endswith("pulse pulse-2 started: tests")
    assert fed(watch, succeeded("pulse-2")).endswith("feat: x")
    assert watch.progress.summary() == "?"


def test_progress_from_the_workflows_state():
    view = {"id": WF, "stage": "execution"}
    cards = {"scope": SCOPE, "pulses": PLAN3["pulses"], "pulse_runs": [
        {"id": "pulse-1", "planned_pulse_id": "pulse-1", "status": "succeeded"},
        {"id": "pulse-2", "planned_pulse_id": "pulse-2", "status": "failed"},
        {"id": "pulse-2-a2", "planned_pulse_id": "pulse-2", "status": "running"},
        {"id": "pulse-3", "planned_pulse_id": "pulse-3", "status": "proposed"},
    ]}
    progress = Progress.from_state(view, cards)
    assert progress.summary() == "execution (stage 4/5), pulse 2/3 “tests”"
    assert (progress.done_tag(), progress.runs["pulse-2-a2"]) == ("1/3 pulses done", "pulse-2")
    watch = Watch(progress=progress)
    assert fed(watch, succeeded("pulse-2-a2")).endswith("[2/3 pulses done]")
    assert Progress.from_state({"stage": "planning"}).summary() == "planning (stage 3/5)"


def test_a_fix_round_counts_its_own_pulses_not_the_plans():
    watch = Watch()
    fed(watch, ev.WorkflowApprovalNeeded(**COMMON, stage="planning", artifact=PLAN))
    fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="planning", to_stage="execution"))
    for pulse in ("pulse-1", "pulse-2"):
        fed(watch, started(pulse, pulse, pulse))
        fed(watch, succeeded(pulse))
    fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="execution", to_stage="review"))
    changed = fed(watch, ev.WorkflowChangesRequested(**COMMON, stage="review", feedback="keep the API", fix=True))
    assert changed.endswith("changes requested for review (the work goes back to be fixed): keep the API")
    fed(watch, ev.WorkflowFixRoundOpened(**COMMON, round=1, feedback="keep the API", comment_ids=["c1", "c2"], pulses=[
        FixPulseView(pulse_id="fix-1-1", title="Fix mw", file_path="api/mw.py", comment_ids=["c1"]),
        FixPulseView(pulse_id="fix-1-2", title="Fix tests", file_path="tests/t.py", comment_ids=["c2"])]))
    assert fed(watch, ev.WorkflowStageChanged(**COMMON, from_stage="review", to_stage="execution")).endswith(
        "stage review → execution  [stage 4/5]")
    line = fed(watch, ev.PulseStarted(**COMMON, pulse_id="fix-1-1", planned_pulse_id="fix-1-1", attempt=1,
                                      title="Fix mw", pulse_branch="b", base_commit="c", fix_round=1))
    assert line.endswith("pulse fix-1-1 started (fix round 1): Fix mw  [fix 1/2 of round 1]")
    assert watch.progress.summary() == "execution (stage 4/5), fix 1/2 of round 1 “Fix mw”"
    assert fed(watch, succeeded("fix-1-1")).endswith("[1/2 fixes done]")
    # The plan's count is left as it was.
    assert watch.progress.done_tag() == "2/2 pulses done"
    state = Progress.from_state({"stage": "execution"}, {"pulses": PLAN["pulses"], "fix_rounds": [
        {"round": 1, "pulses": [{"pulse_id": "fix-1-1", "title": "Fix mw"}]}], "pulse_runs": [
        {"id": "fix-1-1", "planned_pulse_id": "fix-1-1", "status": "running", "fix_round": 1}]})
    assert state.summary() == "execution (stage 4/5), fix 1/1 of round 1 “Fix mw”"


# --- streamed text --------------------------------------------------------------------------------------


def delta(text: str, *, kind: str = "turn:message_delta", restart: bool = False, turn: str = "t-1",
          step: int = 0) -> dict:
    return wire(TurnDelta(type=kind, session_id=SID, turn_id=turn, text=text,  # type: ignore[arg-type]  # kind: one of the Literal's values, as the test names it
                          run_id=WF, step=step, restart=restart))


SAID = " " * 10 + "[research] » "


def test_streamed_text_is_shown_a_line_at_a_time_when_asked():
    watch = Watch(text=True)
    watch.feed(wire(ev.WorkflowSessionAssigned(**COMMON, step="research", session_id=SID, role="research")))
    assert watch.feed(delta("Let me look at")) is None  # no whole line yet
    assert watch.feed(delta(" the README.\n\nIt says")) == SAID + "Let me look at the README."
    assert watch.feed(delta("hi", kind="turn:thought_delta")) is None  # thinking is not shown
    # A tool call is shown as it comes; the rest of the reply's line waits for the next reply (or the turn's end).
    tool = watch.feed(wire(ev.TurnToolStarted(**TURN, tool_use_id="u", tool="read_file", input={"path": "README"})))
    assert tool is not None and tool.endswith("[research] read_file path=README") and "\n" not in tool
    # Long lines are cut; the next reply's first delta completes the last line of the one before.
    long = watch.feed(delta("x" * 300 + "\n", step=1))
    assert long is not None
    rest, long = long.split("\n")
    assert rest == SAID + "It says"
    assert long is not None and len(long) == len(SAID) + 110 and long.endswith("…")
    assert watch.feed(delta("half a sen", step=1)) is None
    assert watch.feed(delta("The answer", restart=True, step=1)) == (
        SAID + "(the model's reply broke off; it starts again)")
    done = watch.feed(wire(ev.TurnCompleted(**TURN, text="…", thoughts="", outcome="end_turn")))
    assert done is not None and done.split("\n")[0] == SAID + "The answer"
    assert "turn done (end_turn)" in done.split("\n")[1]
    # A restart before anything of the reply was shown needs no notice.
    assert watch.feed(delta("again", restart=True, turn="t-2")) is None


def test_two_replies_of_one_turn_stay_on_their_own_lines():
    """Replies streamed back to back (no tool call between their deltas yet) are not run together."""
    watch = Watch(text=True)
    watch.feed(wire(ev.WorkflowSessionAssigned(**COMMON, step="research", session_id=SID, role="research")))
    assert watch.feed(delta("Reading the function.")) is None
    assert watch.feed(delta("Verifying", step=1)) == SAID + "Reading the function."
    done = watch.feed(wire(ev.TurnCompleted(**TURN, text="…", thoughts="", outcome="end_turn")))
    assert done is not None and done.split("\n")[0] == SAID + "Verifying"


def test_streamed_text_is_ignored_unless_asked():
    watch = Watch()
    assert watch.feed(delta("Hello\nworld\n")) is None
    line = watch.feed(wire(ev.TurnCompleted(**TURN, text="Hello\nworld", thoughts="", outcome="end_turn")))
    assert line is not None and "\n" not in line and (watch.turns, watch.total()) == (1, "0 tokens, $0.0000")


def test_show_lists_the_review_comments_and_the_fix_rounds():
    from autarch.cli.workflow_cmd import show_lines

    view = {"id": WF, "title": "JWT", "request": "r", "repo": "/r", "base_branch": "main", "stage": "review",
            "status": "awaiting_approval", "awaiting_approval": True}
    comment = {"comment_id": "0d9d6a42-5c1b-4f57-9a1e-3f2c1b0a9e81", "kind": "line", "severity": "Medium",
               "category": "bug\x1b[2J", "description": "off by one", "file_path": "api/mw.py", "start_line": 3,
               "end_line": 4}
    cards = {"review": {"comments": [comment], "recommendation": "reject", "summary": "one bug"},
             "pulse_runs": [{"id": "fix-1-1", "status": "succeeded", "checkpoint_commit": "abcdef0123",
                             "description": "fix(mw): stop the off-by-one", "fix_round": 1}],
             "fix_rounds": [{"round": 1, "comment_ids": ["c"], "pulses": [{"pulse_id": "fix-1-1",
                                                                          "file_path": "api/mw.py"}]}]}
    lines = show_lines(view, cards)
    assert f"            → autarch workflow approve {WF}   or   autarch workflow request-changes {WF} FEEDBACK " \
           "[--fix]" in lines
    assert "              0d9d6a42 [Medium bug\\x1b[2J] api/mw.py:3-4: off by one" in lines
    assert "  fixes     round 1: 1 comment sent back → fix-1-1 api/mw.py" in lines
    assert any(line.endswith("fix(mw): stop the off-by-one (fix round 1)") for line in lines)
