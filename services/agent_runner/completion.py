"""``complete_pulse``'s own checks (seed 000 "Completion Protocol", seed 004 ``complete_pulse``).

Every check is a function of the session's recorded events (its tool calls, its baselines and how often
completion was refused), so a turn replayed after a crash decides exactly as it did the first time:
- the summary's first line is a Conventional Commit of one of seed 004's types (``invalid_arguments``);
- ``unresolvedIssues`` is refused before the escape hatch is open (``invalid_arguments``: the model was never
  offered the field, so passing it is an argument error, and it does not count towards opening the hatch);
- while tool failures remain unresolved, completion is refused (``completion_rejected``); the refusal that
  brings the count to :data:`ESCAPE_HATCH_AFTER` reveals the hatch, and from then on the requests offer
  ``complete_pulse`` with ``unresolvedIssues`` (``AgentConfig.tools_for``) and a completion listing them
  is accepted;
- ``unresolvedIssues`` when nothing is unresolved is refused too (``invalid_arguments``): accepting it would
  halt the workflow for a human review of nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from autarch.contracts.agents import COMPLETION_REJECTED, ESCAPE_HATCH_FIELD, Baseline, CompletePulseArgs
from autarch.contracts.git import COMMIT_TYPES, CONVENTIONAL_SUBJECT

from .baselines import explained_by_baselines
from .domainmodel import ToolCall

__all__ = ["ESCAPE_HATCH_AFTER", "check_completion", "escape_hatch_open", "unresolved_failures"]

ESCAPE_HATCH_AFTER = 2
"""The rejection of ``complete_pulse`` that reveals the ``unresolvedIssues`` escape hatch."""

# The git service's rule for a commit subject: a summary that passes here is one it will commit.
_CONVENTIONAL = re.compile(CONVENTIONAL_SUBJECT)
_MUTATING_FILE_TOOLS = ("write_file", "edit_file", "multi_edit")


def escape_hatch_open(completion_rejections: int) -> bool:
    """Whether a session refused this many times may list ``unresolvedIssues``."""
    return completion_rejections >= ESCAPE_HATCH_AFTER


def unresolved_failures(history: Iterable[ToolCall], baselines: Sequence[Baseline] = ()) -> list[str]:
    """Tool failures not put right later in the session: a command whose latest run failed (unless its errors
    are all known baselines), a file whose latest write or edit failed."""
    last_by_key: dict[tuple[str, str], ToolCall] = {}
    for call in history:
        if not call.done or not isinstance(call.input, dict):
            continue
        # A call naming no command or file (arguments cut by max_tokens, not JSON, of the wrong type) never ran:
        # it changed nothing and leaves nothing to put right; the model was told and called again.
        if call.name == "shell" and _named(call.input.get("command")):
            last_by_key[("shell", call.input["command"])] = call
        elif call.name in _MUTATING_FILE_TOOLS and _named(call.input.get("path")):
            last_by_key[("file", call.input["path"])] = call
    failures = []
    for (kind, key), call in last_by_key.items():
        if not call.is_error:
            continue
        if kind == "shell" and explained_by_baselines(call.output, baselines):
            continue
        what = f"shell `{key}`" if kind == "shell" else f"{call.name} {key}"
        failures.append(f"{what}: {(call.output or '')[:200]}")
    return failures


def _named(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def check_completion(args: CompletePulseArgs, *, history: Iterable[ToolCall], baselines: Sequence[Baseline],
                     rejections: int) -> tuple[str, str] | None:
    """None when ``complete_pulse`` may end the turn, else ``(rule, what the model is told)``.

    Args:
        rejections: how many times this session's ``complete_pulse`` was refused with ``completion_rejected``.
    """
    first_line = args.summary.strip().partition("\n")[0].strip()
    if not _CONVENTIONAL.match(first_line):
        return "invalid_arguments", (
            f"Rejected, nothing was submitted: the summary's first line {first_line[:120]!r} is not a "
            f"Conventional Commit. Write it as type(scope): description, with type one of "
            f"{', '.join(COMMIT_TYPES)} and the scope optional, for example "
            f"\"feat(auth): validate JWT tokens\" or \"fix: handle an empty name\". Call complete_pulse again.")
    hatch_open = escape_hatch_open(rejections)
    if args.unresolved_issues is not None and not hatch_open:
        return "invalid_arguments", (
            f"Rejected, nothing was submitted: complete_pulse takes no {ESCAPE_HATCH_FIELD} argument (see its "
            "schema). Make the pulse complete and clean, then call complete_pulse with summary and filesChanged "
            "only.")
    failures = unresolved_failures(history, baselines)
    if not failures:
        if args.unresolved_issues:
            return "invalid_arguments", (
                f"Rejected, nothing was submitted: nothing is unresolved (every failed tool call was put right "
                f"later, or only repeats a known baseline issue), so there is nothing to list in "
                f"{ESCAPE_HATCH_FIELD}. Call complete_pulse again without it.")
        return None
    if args.unresolved_issues and hatch_open:
        return None
    listing = "; ".join(failures[:10])
    text = (f"Completion rejected: {len(failures)} tool failure(s) are still unresolved: {listing}. "
            f"Fix them (the pulse must build and its checks must pass), then call complete_pulse again.")
    if escape_hatch_open(rejections + 1):
        text += (f" If an issue genuinely cannot be fixed (a flaky or pre-existing failure), complete_pulse now "
                 f"takes {ESCAPE_HATCH_FIELD}: list each such issue with the reason. This halts automatic "
                 f"execution until a person reviews the pulse.")
    return COMPLETION_REJECTED, text
