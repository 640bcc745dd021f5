"""The ``messages`` of a model request, rebuilt from a session's recorded events alone.

Rules that keep the history valid for the API whatever happened before:
- every ``tool_use`` is answered by a ``tool_result`` in the next user message: the recorded result,
  ``submitted`` for the block tool that ended a turn (sent at the start of the next turn, before the
  user's new message), or a synthesized ``interrupted: …`` error for a call that never got a result
  (a cancelled turn, a turn ended by an error or the budget);
- consecutive user messages are merged (a turn that never reached the model);
- turns up to ``session.compacted_through`` are replaced by a digest (kept within ``session.digest_tokens``);
  the leading tool results that answered the last compacted reply are dropped with it;
- a turn's long tool results up to its ``elided_through`` reply are sent as stubs (in-turn compaction);
- a refused reply (``stop_reason: refusal``) is left out: the API refuses again a conversation that keeps it;
- a paused reply (``pause_turn``) that is the conversation's last is sent as its last message, so the model
  carries on from it;
- each turn's opening message carries the notes recorded for it, before the user's text.
"""

from __future__ import annotations

import json
from typing import Any

from .compaction import elided_result, is_elidable, session_digest
from .domainmodel import Reply, Session, ToolCall, Turn

__all__ = ["SUBMITTED", "build_messages", "notes_block"]

SUBMITTED = json.dumps({"success": True, "status": "submitted"})
"""The result of a block tool that ended its turn."""


def notes_block(notes: list[str]) -> dict[str, Any]:
    """The text block that injects the stage's notes into a turn."""
    listing = "\n".join(f"- {note}" for note in notes)
    return {"type": "text", "text": f"<stage-notes>\nNotes taken in this stage so far:\n{listing}\n</stage-notes>"}


def _interrupted(turn: Turn, call: ToolCall) -> str:
    kind = turn.outcome.kind if turn.outcome is not None else "error"
    why = {"cancelled": "the turn was cancelled", "budget_exceeded": "the workflow's model budget ran out"}.get(
        kind, f"the turn ended ({kind})"
    )
    if call.started:
        # It may have run to the end after the turn stopped waiting for it: say so rather than guess.
        text = (f"interrupted: {why} while this tool call was running; whether it took effect is unknown. "
                "Check the current state (read the file, list the directory) before calling it again.")
    else:
        text = f"interrupted: {why} before this tool call ran; it had no effect. Call it again if still needed."
    return json.dumps({"error": text})


def _results(turn: Turn, reply: Reply, *, elided: bool) -> list[dict[str, Any]]:
    blocks = []
    for call in reply.tool_calls:
        if call.output is not None:
            content, is_error = call.output, call.is_error
            if elided and is_elidable(call):
                content = elided_result(call)
        elif call.tool_use_id == reply.ending_id and turn.outcome is not None and turn.outcome.kind == "block":
            content, is_error = SUBMITTED, False
        else:
            content, is_error = _interrupted(turn, call), True
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call.tool_use_id, "content": content}
        if is_error:
            block["is_error"] = True
        blocks.append(block)
    return blocks


def _mail(turn: Turn, step: int) -> list[dict[str, Any]]:
    # Mail pushed before reply ``step`` follows that reply's prompt (the opening, or the previous results).
    return [given.block() for given in turn.mail if given.step == step]


def _assistant_content(reply: Reply) -> list[dict[str, Any]]:
    # The API refuses an empty assistant message; an empty reply (max_tokens 0, a refusal) still counts.
    return reply.content or [{"type": "text", "text": "(no content)"}]


def build_messages(session: Session, *, current: Turn) -> list[dict[str, Any]]:
    """The conversation up to and including ``current`` (whose last reply's results are all recorded)."""
    messages: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    first = session.compacted_through + 1
    leading: list[dict[str, Any]] = []
    if first > 0:
        leading.append({"type": "text", "text": session_digest(session)})
    for turn in session.turns[first : current.index + 1]:
        opening = [*carried, *leading]
        carried, leading = [], []
        if turn.notes:
            opening.append(notes_block(turn.notes))
        opening.append({"type": "text", "text": turn.text})
        opening.extend(_mail(turn, 0))
        if messages and messages[-1]["role"] == "user":
            messages[-1]["content"].extend(opening)
        else:
            messages.append({"role": "user", "content": opening})
        last = len(turn.replies) - 1
        elided = turn.elided_through
        for n, reply in enumerate(turn.replies):
            if reply.stop_reason == "refusal":
                continue  # it ends its turn: a later turn's opening follows the reply before it
            messages.append({"role": "assistant", "content": _assistant_content(reply)})
            results = [*_results(turn, reply, elided=n <= elided), *_mail(turn, n + 1)]
            if n < last or turn is current:
                if results:
                    messages.append({"role": "user", "content": results})
            else:
                carried = results
    if messages and messages[-1]["role"] == "user":
        # Incremental prompt caching: a breakpoint after the newest block caches the whole conversation so far.
        content = messages[-1]["content"]
        content[-1] = {**content[-1], "cache_control": {"type": "ephemeral"}}
    return messages
