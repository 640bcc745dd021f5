"""What a loop iteration's output says: its signal, its anchor hint, its summary and its commit message.

Seed 001: each iteration emits exactly one signal. An explicit ``<signal>…</signal>`` tag wins; without one the
signal is inferred from the seed's pattern table, in the table's order; with no recognisable pattern the
iteration is BLOCKED (the safe default: a person looks before anything else runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from autarch.contracts.git import CONVENTIONAL_SUBJECT
from autarch.contracts.loops import Signal

__all__ = ["AnchorHint", "SignalReading", "anchor_hint", "commit_message", "read_signal", "summarise"]

SignalSource = Literal["explicit", "inferred", "default"]

_TAG = re.compile(r"<signal>\s*(CONTINUE|COMPLETE|BLOCKED)\s*(?::\s*(.*?))?\s*</signal>", re.IGNORECASE | re.DOTALL)
_HINT = re.compile(
    r"<anchor_hint>\s*<turn_id>\s*(.*?)\s*</turn_id>\s*(?:<reason>\s*(.*?)\s*</reason>\s*)?</anchor_hint>",
    re.IGNORECASE | re.DOTALL,
)
_MARKUP = re.compile(r"<signal>.*?</signal>|<anchor_hint>.*?</anchor_hint>", re.IGNORECASE | re.DOTALL)

_PATTERNS: tuple[tuple[Signal, tuple[str, ...]], ...] = (
    ("COMPLETE", ("all tasks are complete", "implementation is complete")),
    ("BLOCKED", ("need your input", "please provide", "cannot proceed")),
    ("CONTINUE", ("```", "created file", "next step")),
)
"""Seed 001's inference table, in its order (code blocks are the ``` fence)."""

_CONVENTIONAL = re.compile(CONVENTIONAL_SUBJECT)
_WORDS: dict[str, Signal] = {"CONTINUE": "CONTINUE", "COMPLETE": "COMPLETE", "BLOCKED": "BLOCKED"}


@dataclass(frozen=True)
class SignalReading:
    signal: Signal
    source: SignalSource
    reason: str | None = None
    """For BLOCKED: what the agent needs (the tag's text, the sentence that matched, or why none was found)."""


@dataclass(frozen=True)
class AnchorHint:
    turn_id: str
    reason: str | None


def read_signal(text: str) -> SignalReading:
    """The iteration's one signal: the last explicit tag, else the first pattern of the table found, else BLOCKED."""
    tags = _TAG.findall(text)
    if tags:
        # Several tags: the last is the agent's final word (earlier ones are usually quoted or revised).
        word, reason = tags[-1]
        signal = _WORDS[word.upper()]
        if signal == "BLOCKED":
            return SignalReading("BLOCKED", "explicit", reason.strip() or "the agent signalled BLOCKED, with no reason")
        return SignalReading(signal, "explicit")
    lowered = text.lower()
    for signal, patterns in _PATTERNS:
        for pattern in patterns:
            at = lowered.find(pattern)
            if at >= 0:
                reason = _sentence_at(text, at) if signal == "BLOCKED" else None
                return SignalReading(signal, "inferred", reason)
    return SignalReading("BLOCKED", "default", "the iteration's output carried no signal and matched no pattern")


def anchor_hint(text: str) -> AnchorHint | None:
    """The ``<anchor_hint>`` the agent suggests for the next iteration (the last one given), if any."""
    hints = _HINT.findall(text)
    if not hints:
        return None
    turn_id, reason = hints[-1]
    turn_id = turn_id.strip()
    if not turn_id or len(turn_id) > 200:
        return None
    return AnchorHint(turn_id, reason.strip() or None)


def summarise(text: str, limit: int = 200) -> str:
    """A one-line summary of the output: its commit subject if it wrote one, else its first line of prose."""
    subject = _subject(text)
    if subject is not None:
        return _clip(subject, limit)
    for line in _prose_lines(text):
        return _clip(line, limit)
    return "(no output)"


def commit_message(text: str, iteration: int, goal: str) -> tuple[str, str]:
    """(subject, body) of the iteration's commit: the Conventional Commit line the agent wrote (the last one, as
    the report ends its turn), else a ``chore(loop)`` subject naming the iteration and the goal."""
    subject = _subject(text)
    if subject is None:
        subject = f"chore(loop): iteration {iteration}: {_clip(next(iter(_prose_lines(goal)), 'loop'), 60)}"
    body = _MARKUP.sub("", text).strip()
    return subject, body[:20_000]


def _subject(text: str) -> str | None:
    found = [line for line in _prose_lines(text) if len(line) <= 200 and _CONVENTIONAL.match(line)]
    return found[-1] if found else None


def _prose_lines(text: str) -> list[str]:
    lines = []
    fenced = False
    for raw in _MARKUP.sub("", text).splitlines():
        line = raw.strip()
        if line.startswith("```"):
            fenced = not fenced
            continue
        line = line.lstrip("#*- ").strip()
        if line and not fenced:
            lines.append(line)
    return lines


def _clip(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _sentence_at(text: str, at: int) -> str:
    start = max(text.rfind(".", 0, at), text.rfind("\n", 0, at)) + 1
    ends = [i for i in (text.find(".", at), text.find("\n", at)) if i >= 0]
    end = min(ends) if ends else len(text)
    return text[start:end].strip()[:500]
