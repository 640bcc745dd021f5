"""The block-tool rules of seed 004, applied to one model reply.

A turn-ending tool (a block tool, or ``complete_review``) must be the only one in its message, the
last content of the message, and alone (no other tool calls beside it). A call that breaks a rule
is answered with an error tool result naming the rule; the other tool calls of that message run as
usual, and the turn goes on so the model can try again. A valid block tool with valid arguments
ends the turn. ``complete_pulse`` has checks of its own (``completion.py``): a Conventional Commit
summary, and no completion while tool failures remain unresolved (seed 000, "Completion Validation"),
with the ``unresolvedIssues`` escape hatch revealed only after repeated rejections.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from autarch.contracts.agents import (
    BLOCK_TOOL_ARGUMENTS,
    TURN_ENDING_TOOLS,
    AskQuestionsArgs,
    Baseline,
    CompletePulseArgs,
)

from .agents import AgentConfig
from .completion import check_completion
from .domainmodel import ToolCall

__all__ = ["Classification", "Rejection", "classify"]


@dataclass(frozen=True)
class Rejection:
    tool_use_id: str
    name: str
    rule: str
    """``one_per_message``, ``not_last``, ``not_alone``, ``invalid_arguments`` or ``completion_rejected``."""
    message: str
    """The tool result the model is given (JSON ``{"error": …, "rule": …}``)."""


@dataclass
class Classification:
    """What a reply's turn-ending tool calls mean."""

    ending_id: str | None = None
    """The ``tool_use`` that validly ends the turn, if any."""
    rejections: list[Rejection] = field(default_factory=list)


def _error(rule: str, text: str) -> str:
    return json.dumps({"error": text, "rule": rule})


def _is_content(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind in ("thinking", "redacted_thinking"):
        return False
    return not (kind == "text" and not str(block.get("text", "")).strip())


def classify(
    *,
    content: list[dict[str, Any]],
    agent: AgentConfig,
    history: Iterable[ToolCall],
    completion_rejections: int,
    baselines: Sequence[Baseline] = (),
) -> Classification:
    """Apply the block rules to one reply's ``content``.

    Args:
        content: the reply's content blocks (as recorded).
        agent: the session's agent (which turn-ending tools the role has).
        history: the session's earlier tool calls, for the ``complete_pulse`` failure check.
        completion_rejections: how many times ``complete_pulse`` was rejected in this session so far.
        baselines: the session's known issues (a failed command that only repeats them is not a failure).
    """
    uses = [(i, b) for i, b in enumerate(content) if b.get("type") == "tool_use"]
    enders = [
        (i, b) for i, b in uses
        if b["name"] in TURN_ENDING_TOOLS and (b["name"] in agent.block_tools or b["name"] in agent.tool_names)
    ]
    result = Classification()
    if not enders:
        return result
    others = [b["name"] for _, b in uses if all(b is not e for _, e in enders)]
    names = [b["name"] for _, b in enders]
    for position, block in enders:
        broken = []
        if len(enders) > 1:
            broken.append((
                "one_per_message",
                f"only one stage-completion tool may be called per message, and this message called "
                f"{len(enders)} ({', '.join(names)})",
            ))
        after = [b for b in content[position + 1:] if _is_content(b)]
        if after:
            what = ", ".join(b["name"] if b.get("type") == "tool_use" else b.get("type", "?") for b in after)
            broken.append(("not_last", f"{block['name']} must be the last content of the message, but {what} "
                                       f"came after it"))
        if others:
            broken.append(("not_alone", f"{block['name']} cannot be combined with other tool calls in the same "
                                        f"message (this message also called {', '.join(others)}; those calls "
                                        f"were run as usual)"))
        if broken:
            text = (f"Rejected, nothing was submitted: {'; '.join(reason for _, reason in broken)}. "
                    f"Call {block['name']} alone, as the last thing in a message of its own, then stop.")
            result.rejections.append(
                Rejection(block["id"], block["name"], ",".join(rule for rule, _ in broken), _error(broken[0][0], text))
            )
    if result.rejections:
        return result
    [(_, block)] = enders
    rejection = _check_arguments(block, history=history, completion_rejections=completion_rejections,
                                 baselines=baselines)
    if rejection is not None:
        result.rejections.append(rejection)
    else:
        result.ending_id = block["id"]
    return result


def _check_arguments(block: dict[str, Any], *, history: Iterable[ToolCall], completion_rejections: int,
                     baselines: Sequence[Baseline]) -> Rejection | None:
    name, tool_use_id = block["name"], block["id"]
    kind = BLOCK_TOOL_ARGUMENTS.get(name)
    if kind is None:
        return None  # complete_review: the tools service validates and runs it
    try:
        args = msgspec.convert(block.get("input"), kind)
    except msgspec.ValidationError as exc:
        return Rejection(tool_use_id, name, "invalid_arguments", _error(
            "invalid_arguments",
            f"Rejected, nothing was submitted: invalid arguments for {name}: {exc}. "
            f"Call {name} again with arguments that match its schema.",
        ))
    if isinstance(args, AskQuestionsArgs):
        for n, question in enumerate(args.questions):
            if question.type != "free_text" and not question.options:
                return Rejection(tool_use_id, name, "invalid_arguments", _error(
                    "invalid_arguments",
                    f"Rejected, nothing was submitted: questions[{n}] is {question.type} and needs options. "
                    f"Give its options, or make it free_text.",
                ))
    if isinstance(args, CompletePulseArgs):
        refusal = check_completion(args, history=history, baselines=baselines, rejections=completion_rejections)
        if refusal is not None:
            rule, text = refusal
            return Rejection(tool_use_id, name, rule, _error(rule, text))
    return None
