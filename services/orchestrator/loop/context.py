"""An iteration's context: its anchor turn (seed 001 "Resolution Priority"), the slice around it, and its prompt.

The anchor is resolved in the seed's order: chained (the previous iteration's ``<anchor_hint>``), explicit (the
session's ``anchor_turn_id``), semantic (the project's recorded turns searched with the goal), temporal (the
project's most recent turn). The turn memory lives in the indexer; without a reachable indexer the iteration
runs with no anchor (``none``) rather than waiting: the loop must not stall on its memory.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec

from autarch.contracts.turns import (
    FindTurn,
    LatestTurn,
    SearchTurns,
    SliceView,
    TurnFound,
    TurnHit,
    TurnHits,
    TurnRecord,
    TurnSlice,
)

from .model import Anchor, LoopSession

__all__ = ["Ask", "IterationContext", "build_context", "estimate_tokens"]

T = TypeVar("T")
Ask = Callable[[str, msgspec.Struct, type[T]], Awaitable[T]]
"""Asks the indexer ``verb`` with a payload; raises on failure (a service error, no indexer, a timeout)."""

SLICE_BUDGET = 4000
"""Tokens of conversation around the anchor put into a prefetch prompt."""
SEARCH_RESULTS = 3
MIN_SALIENCE = 0.25
"""Similarity below which the best search hit is not taken as the anchor (the temporal anchor is used instead):
a turn that barely resembles the goal would steer the iteration wrongly."""


@dataclass
class IterationContext:
    anchor: Anchor
    prompt: str
    context_tokens: int
    memory_error: str | None = None
    """Why the turn memory could not be used (the iteration then runs without it)."""
    related: list[TurnHit] = field(default_factory=list)


def estimate_tokens(text: str) -> int:
    """About four characters a token: enough to budget a prompt, no tokenizer on the hot path."""
    return (len(text) + 3) // 4


async def build_context(session: LoopSession, ask: Ask[Any]) -> IterationContext:
    """Resolve the anchor of the session's next iteration and write its prompt."""
    number = session.iteration_count + 1
    anchor = Anchor(strategy="none")
    slice_: SliceView | None = None
    related: list[TurnHit] = []
    memory_error = None
    if session.context_strategy != "none":
        try:
            anchor, hits = await _resolve(session, ask)
            if session.context_strategy in ("prefetch", "hybrid"):
                related = [hit for hit in hits if hit.turn_id != anchor.turn_id][:SEARCH_RESULTS]
                if anchor.turn_id is not None:
                    slice_ = await ask("turn_slice", TurnSlice(turn_id=anchor.turn_id, token_budget=SLICE_BUDGET),
                                       SliceView)
                    anchor = msgspec.structs.replace(anchor, slice_id=slice_.slice_id,
                                                     slice_turn_ids=list(slice_.turn_ids),
                                                     node_count=slice_.node_count, depth=slice_.depth)
        except Exception as exc:  # the memory is an aid: an iteration without it beats a stalled loop
            memory_error = f"turn memory unavailable: {exc}"
    prompt = _prompt(session, number, anchor, slice_, related)
    return IterationContext(anchor=anchor, prompt=prompt, context_tokens=estimate_tokens(prompt),
                            memory_error=memory_error, related=related)


async def _resolve(session: LoopSession, ask: Ask[Any]) -> tuple[Anchor, list[TurnHit]]:
    started = time.perf_counter()

    def took() -> float:
        return round((time.perf_counter() - started) * 1000, 3)

    project = session.project_path
    previous = session.current_iteration()
    if previous is not None and previous.anchor_hint_next:
        found = await ask("find_turn", FindTurn(turn_id=previous.anchor_hint_next, project_path=project), TurnFound)
        if found.turn is not None:
            return _anchor("chained", found.turn, took(), salience=1.0), []
    if session.anchor_turn_id:
        found = await ask("find_turn", FindTurn(turn_id=session.anchor_turn_id, project_path=project), TurnFound)
        if found.turn is not None:
            return _anchor("explicit", found.turn, took(), salience=1.0), []
    hits = await ask("search_turns", SearchTurns(project_path=project, query=session.goal, limit=SEARCH_RESULTS + 1),
                     TurnHits)
    relevant = [hit for hit in hits.items if hit.score >= MIN_SALIENCE]
    if relevant:
        best = max(relevant, key=lambda hit: hit.score)
        return Anchor(strategy="semantic", turn_id=best.turn_id, resolution_ms=took(), salience=best.score,
                      depth=best.index), relevant
    latest = await ask("latest_turn", LatestTurn(project_path=project), TurnFound)
    if latest.turn is not None:
        return _anchor("temporal", latest.turn, took(), salience=None), relevant
    return Anchor(strategy="none", resolution_ms=took()), []


def _anchor(strategy: str, turn: TurnRecord, ms: float, *, salience: float | None) -> Anchor:
    # Chained and explicit anchors were chosen (by the agent, by the person): full salience. A temporal anchor
    # is only the latest turn: no relevance was measured.
    return msgspec.convert({"strategy": strategy, "turn_id": turn.turn_id, "resolution_ms": ms, "salience": salience,
                            "depth": turn.index}, Anchor)


def _prompt(session: LoopSession, number: int, anchor: Anchor, slice_: SliceView | None,
            related: list[TurnHit]) -> str:
    lines = [
        f"Goal: {session.goal}",
        "",
        f"Project: {session.project_name}, on the branch {session.branch_name}. "
        f"This is iteration {number} of at most {session.max_iterations}.",
    ]
    if session.resume_message:
        lines += ["", "The person resumed the session with this message:", session.resume_message]
    previous = session.current_iteration()
    if previous is not None and previous.status != "complete" and previous.reason:
        lines += ["", f"The previous iteration ended {previous.status}: {previous.reason}"]
    log = session.progress_log(last=20)
    if log:
        lines += ["", "What earlier iterations did:"]
        for entry in log:
            commit = f", commit {entry.commit_hash[:10]}" if entry.commit_hash else ", no commit"
            turn = f", turn {entry.turn_id}" if entry.turn_id else ""
            lines.append(f"- iteration {entry.iteration} ({entry.signal}{commit}{turn}): {entry.summary}")
    if slice_ is not None and slice_.turns:
        lines += ["", f"Context, anchored on turn {anchor.turn_id} ({anchor.strategy}):"]
        for record in slice_.turns:
            where = f"iteration {record.iteration_number}" if record.iteration_number else f"turn {record.index}"
            lines += [f"--- turn {record.turn_id} ({where}) ---", record.text.strip()[:4000]]
        lines.append("--- end of context ---")
    if related:
        lines += ["", "Other recorded turns that may be relevant:"]
        lines += [f"- turn {hit.turn_id} (relevance {hit.score:.2f}): {hit.excerpt}" for hit in related]
    if session.context_strategy in ("mcp", "hybrid"):
        anchored = f" (the anchor turn is {anchor.turn_id}, found {anchor.strategy})" if anchor.turn_id else ""
        lines += ["", "Earlier work on this project is recorded: search it with search_history when it matters "
                  f"to your step{anchored}."]
    lines += ["", "Take the next step towards the goal, then report and end with exactly one signal."]
    return "\n".join(lines)
