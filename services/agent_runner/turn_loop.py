"""The turn loop: a deterministic function of the session's recorded events.

Each step looks at the turn's events and does the one thing they call for:
- the last reply was refused (``stop_reason: refusal``) → record the turn's completion, with its words;
- the last reply has tool calls without results → run the first of them (each result is recorded
  before the next one runs);
- the last reply validly ended the turn (a block tool, ``complete_review`` that succeeded, or no tool
  call at all, unless it was paused: ``pause_turn`` is carried on) → record the turn's completion;
- otherwise → check the budget, compact if the context is too big, call the model, and record the
  full reply before acting on it (``endings.py``: a reply cut by ``max_tokens``, a request too long).
A runner that dies anywhere in this loop is replaced by one that rebuilds the session and takes the
same decision again: a recorded reply is never requested twice, and a tool call repeated after a
crash carries the same idempotency key (session, tool_use id), so the tools service answers it with
the recorded result instead of running it again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.agents import BLOCK_TOOLS
from autarch.contracts.tool_catalog import MUTATING_TOOLS
from autarch.contracts.tools import CALL, ToolCall, ToolResult
from autarch.runtime.conflicts import WriteConflict
from autarch.runtime.errors import RemoteError
from autarch.runtime.requests import request
from autarch.runtime.settings import AgentRunnerSettings
from autarch.runtime.storage import StorageFull, remote_storage_full

from .agents import AgentConfig
from .blocks import classify
from .budget import WorkflowBudget
from .compaction import KEEP_RECENT_STEPS, compaction_point, digest_budget, elision_point
from .completion import escape_hatch_open
from .deltas import DeltaPublisher
from .discipline import edit_refusal, refusal_text, run_verification, without_red_runs
from .domainmodel import Session, Turn
from .domainmodel import ToolCall as RecordedCall
from .endings import cut_error, output_budget, refusal_detail
from .model_client import ContextOverflow, ModelClient, ModelError, ModelReply
from .pricing import cost_usd, model_info
from .research_yield import RESEARCH_YIELD_ERROR, over_the_limit
from .tool_cancel import STOP_TURN, cancel_timeout, cancel_tool_call
from .transcript import build_messages

__all__ = ["CallModel", "Complete", "RunTool", "RunnerDeps", "TurnLoop", "next_action", "truncate"]

log = logging.getLogger(__name__)

_TOOLS_CALL = subjects.request("tools", CALL)


@dataclass(frozen=True)
class CallModel:
    """Ask the model for the next reply."""


@dataclass(frozen=True)
class RunTool:
    call: RecordedCall


@dataclass(frozen=True)
class Complete:
    outcome: dict[str, Any]


CALL_MODEL = CallModel()


def next_action(turn: Turn) -> CallModel | RunTool | Complete:
    """What the turn's recorded events call for next (a pure function of them)."""
    if not turn.replies:
        return CALL_MODEL
    reply = turn.replies[-1]
    if reply.stop_reason == "refusal":
        # Recorded with its completion as a rule; this serves a reply recorded without one.
        return Complete({"kind": "refusal", "detail": refusal_detail(reply.content, None)})
    for call in reply.tool_calls:
        if call.done:
            continue
        if call.tool_use_id == reply.ending_id and call.name in BLOCK_TOOLS:
            continue  # a block tool is never run: it ends the turn
        return RunTool(call)
    if reply.ending_id is not None:
        call = turn.calls[reply.ending_id]
        if call.name in BLOCK_TOOLS or not call.is_error:
            return Complete({"kind": "block", "tool": call.name, "arguments": call.input, "detail": ""})
        return CALL_MODEL  # complete_review failed (no review card, a bad recommendation): the model fixes it
    if not reply.tool_calls:
        if reply.stop_reason == "pause_turn":
            return CALL_MODEL  # the reply goes back as the last assistant message and the model carries on
        detail = "" if reply.stop_reason in (None, "end_turn") else f"stop_reason: {reply.stop_reason}"
        return Complete({"kind": "end_turn", "detail": detail})
    return CALL_MODEL


def truncate(output: str, *, limit: int) -> str:
    """``output`` cut to ``limit`` bytes of UTF-8, with a marker the model can read."""
    data = output.encode()
    if len(data) <= limit:
        return output
    head = data[:limit].decode(errors="ignore")
    return (f"{head}\n[output truncated: {len(data)} bytes in total, only the first {limit} are shown. "
            "Ask for less (a line range, a narrower pattern or path, quieter command output) to see the rest.]")


@dataclass
class RunnerDeps:
    """What every turn of the process shares."""

    nc: Client
    model: ModelClient
    budget: WorkflowBudget
    settings: AgentRunnerSettings
    save: Callable[[Session], Awaitable[None]]
    """Durably record the session's pending events."""
    on_reply: Callable[[Session, ModelReply, float], None] | None = None
    """Called after each reply is recorded, with the time it was recorded (``perf_counter``): metrics."""
    on_model_wait: Callable[[], None] | None = None
    """Called when a model request is on the wire and the turn waits for its reply (the relay's moment)."""
    before_model: Callable[[Session, Turn], Awaitable[None]] | None = None
    """Called before each model call's request is built (``mail_push``: a worker's new coordination mail)."""


class TurnLoop:
    """Runs one turn of one session to its end (or until cancelled)."""

    def __init__(self, *, deps: RunnerDeps, session: Session, turn: Turn, agent: AgentConfig) -> None:
        self.deps = deps
        self.session = session
        self.turn = turn
        self.agent = agent
        self.stop_reason = "stopped"
        """Set by the service before it cancels the loop's task."""
        self.unrecorded_stop: StorageFull | None = None
        """The stop that cancelled the turn could not be recorded for lack of space (the runner records it later)."""
        self.stop_conflicted = False
        """The stop that cancelled the turn was not recorded: another writer had recorded the session's next
        version first (the runner records it on what is stored)."""
        self._sid = str(session.id)
        self._where = "starting"
        self._overflowed = False
        """The last request was refused as too long and the conversation compacted: the next refusal ends it."""
        self._partial: list[str] = []
        self._deltas = DeltaPublisher(nc=deps.nc, run_id=session.run_id, session_id=self._sid,
                                      turn_id=turn.turn_id)
        headers = {"x-autarch-role": session.role, "x-autarch-session": self._sid}
        if session.script:
            headers["x-autarch-script"] = session.script
        self._headers = headers

    async def run(self, *, record_cancel: Callable[[], bool] = lambda: True) -> None:
        """Drive the turn to its end.

        Args:
            record_cancel: asked when the task is cancelled: True records the turn as ``cancelled`` (a stop
                command); False leaves it in progress for the next process to resume (a shutdown).
        """
        try:
            while True:
                action = next_action(self.turn)
                if isinstance(action, Complete):
                    if self._needs_verification(action.outcome):
                        await self._verify_close()
                        continue
                    await self._complete(action.outcome)
                    return
                if isinstance(action, RunTool):
                    await self._run_tool(action.call)
                elif not await self._call_model():
                    return
        except asyncio.CancelledError:
            # A cancel that lands while the turn's completion is being saved finds the turn already ended.
            if self.turn.running and record_cancel():
                try:
                    await self._record_cancelled()
                except StorageFull as full:
                    # The turn stays in progress as recorded; the runner records the stop once there is room.
                    self.unrecorded_stop = full
                except WriteConflict:
                    # Another writer recorded the session first: the runner records the stop on what it recorded.
                    self.stop_conflicted = True
            raise
        except (StorageFull, WriteConflict):
            # Not the turn's failure: the runner runs it again once the store has room, or from what the other
            # writer recorded (service.py). Recording a failure on top of events the store refused would be wrong.
            raise
        except Exception as exc:
            log.exception("turn %s of session %s failed", self.turn.turn_id, self._sid)
            if self.turn.running:
                await self._fail(f"{type(exc).__name__}: {exc}")

    # --- steps -----------------------------------------------------------------------------------------

    async def _call_model(self) -> bool:
        """One model call; False when the turn ended instead (budget, step limit, model failure)."""
        settings, session, turn = self.deps.settings, self.session, self.turn
        if len(turn.replies) >= settings.agent_max_steps:
            await self._complete({"kind": "step_limit", "detail": f"{settings.agent_max_steps} model calls in one "
                                                                  "turn (agent_max_steps)"})
            return False
        over = self.deps.budget.exceeded(session.run_id)
        if over is not None:
            await self._complete({"kind": "budget_exceeded", "detail": over})
            return False
        window = self._window()
        discipline = session.discipline
        if discipline is not None and turn.replies:
            # A worker past its share of the window stops here, after its current step, and hands off: a fresh
            # session resumes from the handoff rather than working on with a summary of itself (seed 002).
            used = session.last_context_tokens() / window
            if used >= discipline.handoff_at:
                await self._complete({"kind": "handoff", "detail": f"context at {used:.0%} of the window",
                                      "tokens_used_pct": round(used, 4)})
                return False
        if self._compact(int(window * settings.compaction_threshold)):
            await self.deps.save(session)
        if self.deps.before_model is not None:
            await self.deps.before_model(session, turn)
        messages = build_messages(session, current=turn)
        self._where = f"model call {len(turn.replies) + 1}"
        self._partial = []
        try:
            reply = await self.deps.model.reply(
                agent=self.agent, messages=messages, headers=self._headers, on_delta=self._on_delta,
                on_sent=self.deps.on_model_wait,
                # complete_pulse offers unresolvedIssues only once the session's escape hatch is open.
                tools=self.agent.tools_for(escape_hatch=escape_hatch_open(session.completion_rejections)),
                max_tokens=output_budget(turn, self.agent),
            )
        except ContextOverflow as exc:
            return await self._overflow(str(exc))
        except ModelError as exc:
            await self._fail(str(exc))
            return False
        self._overflowed = False
        self._record_reply(reply)
        self._partial = []
        if reply.stop_reason == "refusal":
            # Recorded in the same save as the reply: a rebuilt session never asks for the refused reply again.
            await self._complete({"kind": "refusal", "detail": refusal_detail(reply.content, reply.stop_details)})
            if self.deps.on_reply is not None:
                self.deps.on_reply(session, reply, time.perf_counter())
            return False
        self._start_next_tool()
        await self.deps.save(session)
        if self.deps.on_reply is not None:
            self.deps.on_reply(session, reply, time.perf_counter())
        return True

    def _window(self) -> int:
        return self.deps.settings.context_window_tokens or model_info(self.agent.model).context_window

    def _compact(self, threshold: int) -> bool:
        """Compact older turns, else elide this turn's older results, when the last request was over
        ``threshold`` tokens (a negative one: both, whatever the size); whether anything changed."""
        session, turn = self.session, self.turn
        through = compaction_point(session, current=turn, threshold_tokens=threshold)
        if through is not None:
            session.compact(turn_id=turn.turn_id, through=through, context_tokens=session.last_context_tokens(),
                            digest_tokens=digest_budget(self._window()))
            if threshold >= 0:
                return True
        # No older turn left to compact (or a forced round): this turn alone outgrew the window, its older results go.
        step = elision_point(session, current=turn, threshold_tokens=threshold)
        if step is not None:
            session.elide_results(turn_id=turn.turn_id, through_step=step,
                                  context_tokens=session.last_context_tokens())
        return through is not None or step is not None

    async def _overflow(self, message: str) -> bool:
        """The API refused the request as too long: compact now and send it again, once; else end the turn."""
        if not self._overflowed and self._compact(-1):
            self._overflowed = True
            log.info("session %s: %s; compacted, asking again", self._sid, message)
            await self.deps.save(self.session)
            return True
        if self._overflowed:
            why = "compacting the conversation did not make it fit"
        else:
            why = (f"nothing is left to compact (earlier turns are a digest already, and this turn's last "
                   f"{KEEP_RECENT_STEPS} replies and its short results are always sent whole)")
        await self._fail(f"the request is longer than the model's context window ({message}); {why}",
                         kind="context_overflow")
        return False

    async def _on_delta(self, is_thinking: bool, text: str, restart: bool) -> None:
        if not is_thinking:
            if restart:
                self._partial = []  # a retried stream starts the reply over: keep only what it sends
            self._partial.append(text)
        await self._deltas.publish(is_thinking, text, restart, step=len(self.turn.replies))

    def _record_reply(self, reply: ModelReply) -> None:
        session, turn = self.session, self.turn
        usage = reply.usage
        cost = cost_usd(reply.model, usage)
        limit = output_budget(turn, self.agent)  # the request's, before this reply counts
        if reply.stop_reason == "refusal":
            # Nothing of a refused reply runs: the turn ends with it.
            session.record_reply(turn_id=turn.turn_id, content=reply.content, stop_reason=reply.stop_reason,
                                 usage=msgspec.structs.asdict(usage), cost_usd=cost, model=reply.model,
                                 ending_id=None)
            self.deps.budget.add(session.run_id, usage, cost)
            return
        # A call cut short is not judged by the block rules: it is answered as cut (below).
        judged = [b for b in reply.content if reply.cut is None or b.get("id") != reply.cut]
        verdict = classify(content=judged, agent=self.agent, history=_earlier_calls(session),
                           completion_rejections=session.completion_rejections, baselines=session.baselines)
        session.record_reply(turn_id=turn.turn_id, content=reply.content, stop_reason=reply.stop_reason,
                             usage=msgspec.structs.asdict(usage), cost_usd=cost, model=reply.model,
                             ending_id=verdict.ending_id)
        self.deps.budget.add(session.run_id, usage, cost)
        for rejection in verdict.rejections:
            session.reject_block(turn_id=turn.turn_id, tool_use_id=rejection.tool_use_id, name=rejection.name,
                                 rule=rejection.rule, message=rejection.message)
        # Calls the runner can answer itself are answered now, in the same transaction as the reply.
        runnable = []
        for call in turn.replies[-1].tool_calls:
            if call.done:
                continue
            if call.tool_use_id == reply.cut:
                error: str | None = cut_error(call.name, limit=limit, next_limit=output_budget(turn, self.agent))
            else:
                error = self._local_error(call, reply.malformed.get(call.tool_use_id))
            if error is None:
                runnable.append(call)
            else:
                session.complete_tool(turn_id=turn.turn_id, tool_use_id=call.tool_use_id, name=call.name,
                                      output=error, is_error=True, duration_ms=0.0, replayed=False)
        if session.role == "research":
            for call in over_the_limit(turn, runnable):
                session.complete_tool(turn_id=turn.turn_id, tool_use_id=call.tool_use_id, name=call.name,
                                      output=RESEARCH_YIELD_ERROR, is_error=True, duration_ms=0.0, replayed=False)

    def _local_error(self, call: RecordedCall, malformed: str | None) -> str | None:
        if self.session.discipline is not None:
            history = [c for t in self.session.turns for c in t.calls.values()]
            refused = edit_refusal(self.session.discipline, history, call.name, call.input,
                                   reread_needed=self.session.reread_needed)
            if refused is not None:
                return refused
        if malformed is not None:
            return json.dumps({"error": f"The arguments of this {call.name} call are not a JSON object, so it did "
                                        f"not run: {malformed[:500]!r}. Call it again with a JSON object that "
                                        "matches the tool's schema."})
        if call.name in self.agent.tool_names or call.name in self.agent.block_tools:
            return None
        if call.name in BLOCK_TOOLS or call.name == "complete_review":
            why = f"{call.name} is not available to the {self.session.role} agent"
        else:
            why = f"Unknown tool {call.name!r}"
        offered = sorted(self.agent.tool_names | set(self.agent.block_tools))
        return json.dumps({"error": f"{why}; it did not run. Available tools: {', '.join(offered)}."})

    def _start_next_tool(self) -> None:
        action = next_action(self.turn)
        if isinstance(action, RunTool) and not action.call.started:
            call = action.call
            self.session.start_tool(turn_id=self.turn.turn_id, tool_use_id=call.tool_use_id, name=call.name,
                                    input=call.input)

    async def _run_tool(self, call: RecordedCall) -> None:
        session, turn = self.session, self.turn
        if not call.started:
            self._start_next_tool()
            await self.deps.save(session)
        self._where = f"tool {call.name} ({call.tool_use_id})"
        args = call.input if isinstance(call.input, dict) else {}
        started = time.perf_counter()
        try:
            # Idempotent: the tools service answers a repeat of (session, tool_use id) with the recorded result,
            # or runs it once more if the instance running it died; so a call whose tools instance is gone is
            # sent again within seconds instead of reported to the model as failed after its timeout.
            result = await request(
                self.deps.nc, _TOOLS_CALL,
                ToolCall(session_id=self._sid, tool_call_id=call.tool_use_id, role=session.role,
                         root=session.root, tool=call.name, arguments=args, run_id=session.run_id,
                         lease_holder=session.lease_holder),
                ToolResult, timeout=self._tool_timeout(call.name, args), retry_unavailable=15.0, idempotent=True,
            )
            output, is_error, replayed = result.content, result.is_error, result.replayed
            duration = result.duration_ms or (time.perf_counter() - started) * 1000
        except RemoteError as exc:
            full = remote_storage_full(exc.code, exc.message, exc.reply.details,
                                       str(self.deps.settings.data_path / "tools"))
            if full is not None:
                # The tools service could not record the call for lack of space: not the model's to handle. The
                # turn waits for room and asks again with the same idempotency key (service.py).
                raise full from None
            output = json.dumps({"error": f"{call.name} could not run: {exc.code}: {exc.message}"})
            is_error, replayed, duration = True, False, (time.perf_counter() - started) * 1000
        except asyncio.CancelledError as stop:
            if stop.args[:1] == (STOP_TURN,) and call.name in MUTATING_TOOLS:
                # A stop command (not a shutdown): a call with an effect must not go on changing the worktree
                # after the turn is recorded as cancelled, so it is stopped first and the record says how it
                # went. A read-only call can change nothing: it is left to finish unseen.
                outcome = await cancel_tool_call(
                    self.deps.nc, session_id=self._sid, tool_call_id=call.tool_use_id, reason=self.stop_reason,
                    timeout=cancel_timeout(self.deps.settings.request_timeout))
                self._where = f"{self._where}, {outcome}"
            raise
        output = truncate(output, limit=self.deps.settings.tool_output_limit)
        session.complete_tool(turn_id=turn.turn_id, tool_use_id=call.tool_use_id, name=call.name, output=output,
                              is_error=is_error, duration_ms=round(duration, 3), replayed=replayed)
        self._start_next_tool()
        await self.deps.save(session)

    def _tool_timeout(self, name: str, args: dict[str, Any]) -> float:
        if name == "shell":
            seconds = args.get("timeoutSeconds", 60)
            seconds = seconds if isinstance(seconds, int | float) else 60
            return min(max(float(seconds), 1.0), 300.0) + 30.0
        return max(self.deps.settings.request_timeout, 120.0)

    # --- a worker's verification ------------------------------------------------------------------------

    def _ending_call(self) -> RecordedCall | None:
        reply = self.turn.replies[-1] if self.turn.replies else None
        return self.turn.calls.get(reply.ending_id) if reply is not None and reply.ending_id else None

    def _needs_verification(self, outcome: dict[str, Any]) -> bool:
        call = self._ending_call()
        return (self.session.discipline is not None and outcome.get("tool") == "complete_pulse"
                and call is not None and call.tool_use_id not in self.turn.evidence)

    async def _verify_close(self) -> None:
        """Run the bead's verification now; record it; a failure refuses the close and the turn goes on."""
        call = self._ending_call()
        discipline = self.session.discipline
        assert call is not None and discipline is not None
        self._where = f"verification of {discipline.bead_id}"
        history = [c for t in self.session.turns for c in t.calls.values()]

        async def shell(call_id: str, command: str) -> tuple[str, bool, float]:
            args = {"reason": f"verify bead {discipline.bead_id}", "command": command, "timeoutSeconds": 300}
            try:
                result = await request(
                    self.deps.nc, _TOOLS_CALL,
                    ToolCall(session_id=self._sid, tool_call_id=call_id, role=self.session.role,
                             root=self.session.root, tool="shell", arguments=args,
                             run_id=self.session.run_id, lease_holder=self.session.lease_holder),
                    ToolResult, timeout=self._tool_timeout("shell", args), retry_unavailable=15.0, idempotent=True)
            except RemoteError as exc:
                return json.dumps({"error": f"{exc.code}: {exc.message}"}), True, 0.0
            return result.content, result.is_error, result.duration_ms or 0.0

        evidence = await run_verification(discipline, history=history, call_id=call.tool_use_id, shell=shell)
        refusal = None if evidence.passed else refusal_text(evidence)
        self.session.record_verification(turn_id=self.turn.turn_id, tool_use_id=call.tool_use_id,
                                         evidence=msgspec.to_builtins(evidence), refusal=refusal)
        await self.deps.save(self.session)

    # --- endings ---------------------------------------------------------------------------------------

    async def _complete(self, outcome: dict[str, Any]) -> None:
        turn = self.turn
        call = self._ending_call()
        if call is not None and call.tool_use_id in turn.evidence and outcome.get("kind") == "block":
            outcome = {**outcome, "evidence": msgspec.to_builtins(turn.evidence[call.tool_use_id])}
        texts = [b.get("text", "") for r in turn.replies for b in r.content if b.get("type") == "text"]
        partial = "".join(self._partial)
        if partial:
            texts.append(partial)
            outcome = {**outcome, "partial_text": partial}
        thoughts = [b.get("thinking", "") for r in turn.replies for b in r.content if b.get("type") == "thinking"]
        self.session.complete_turn(
            turn_id=turn.turn_id, outcome=outcome, at=datetime.now(UTC), text="\n\n".join(t for t in texts if t),
            thoughts="\n\n".join(t for t in thoughts if t), usage=msgspec.structs.asdict(turn.usage),
            cost_usd=round(turn.cost_usd, 8), tool_calls=len(turn.calls), model_calls=len(turn.replies),
        )
        await self.deps.save(self.session)

    async def _fail(self, message: str, *, kind: str = "error") -> None:
        self.session.record_error(turn_id=self.turn.turn_id, message=message)
        await self._complete({"kind": kind, "detail": message})

    async def record_stop(self) -> None:
        """Record the turn as cancelled by a stop (``stop_reason``) that could not be recorded when it came."""
        await self._record_cancelled()

    async def _record_cancelled(self) -> None:
        done = sum(1 for c in self.turn.calls.values() if c.done)
        detail = (f"{self.stop_reason}: cancelled during {self._where}; {len(self.turn.replies)} model "
                  f"replies and {done} tool results were recorded before it")
        await self._complete({"kind": "cancelled", "detail": detail})


def _earlier_calls(session: Session) -> Iterator[RecordedCall]:
    """The session's earlier tool calls as the block rules judge them, gathered only if a rule reads them (the
    ``complete_pulse`` failure check): gathered at every reply, they cost each model call in proportion to every
    call the session ever made."""
    yield from without_red_runs(session.discipline, [c for t in session.turns for c in t.calls.values()])
