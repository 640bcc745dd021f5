"""Fix rounds: a review's comments sent back to execution as fix pulses, and what the review is told after them.

Pure functions of recorded state (no events, no I/O). A fix round groups the comments it fixes by file: one fix
pulse per file the comments name, in the order the review first named each file, then one for the comments on
no file. A file's comments usually touch the same code (often neighbouring lines), so one agent fixing them
together sees how they interact, and the branch gains one commit per file rather than one per remark; each pulse
is also an agent session of its own, so fewer pulses cost less. The comments' severity does not split or drop
them: the user chose what is sent back (every comment, or the ones named).
"""

from __future__ import annotations

from collections.abc import Iterable

from autarch.contracts.workflows import FixPulseView, FixRoundView, ReviewCommentView

from .state import PulseRun

__all__ = ["comment_line", "fix_pulses", "review_again"]


def fix_pulses(comments: list[ReviewCommentView], number: int, taken: Iterable[str]) -> list[FixPulseView]:
    """The fix pulses of fix round ``number`` for ``comments``, with ids (``fix-<round>-<n>``) not in ``taken``."""
    groups: dict[str | None, list[str]] = {}
    for comment in comments:
        groups.setdefault(comment.file_path or None, []).append(comment.comment_id)
    files: list[str | None] = [f for f in groups if f is not None]
    if None in groups:
        files.append(None)
    used = set(taken)
    pulses = []
    for n, file_path in enumerate(files, 1):
        pulse_id = _fresh(f"fix-{number}-{n}", used)
        used.add(pulse_id)
        title = f"Fix the review's comments on {file_path}" if file_path else "Fix the review's general comments"
        pulses.append(FixPulseView(pulse_id=pulse_id, title=title, file_path=file_path,
                                   comment_ids=groups[file_path]))
    return pulses


def _fresh(candidate: str, used: set[str]) -> str:
    # A plan may name its own pulses anything; a fix pulse's id (also its git pulse id) must be new.
    given, n = candidate, 1
    while candidate in used:
        n += 1
        candidate = f"{given}-{n}"
    return candidate


def comment_line(comment: ReviewCommentView) -> str:
    """``[High · bug] api/mw.py:3-5: the description``: one review comment, as agents are shown it."""
    where = comment.file_path or "(the change as a whole)"
    if comment.start_line is not None:
        where += f":{comment.start_line}"
        if comment.end_line is not None and comment.end_line != comment.start_line:
            where += f"-{comment.end_line}"
    return f"[{comment.severity} · {comment.category}] {where}: {comment.description}"


def _quoted(text: str) -> str:
    return "\n".join(f"> {line}" for line in text.splitlines() or [""])


def review_again(fix_round: FixRoundView, runs: list[PulseRun]) -> str:
    """The message that asks the review agent to review the branch again after ``fix_round``'s pulses."""
    sent = set(fix_round.comment_ids)
    lines = [f"The user sent your review back to have its comments fixed (fix round {fix_round.round}), with this "
             "feedback:", _quoted(fix_round.feedback), "", "Fix pulses committed on the branch since your review:"]
    for run in runs:
        if run.fix_round == fix_round.round and run.status == "succeeded":
            commit = (run.checkpoint_commit or "?")[:10]
            subject = (run.description or "").partition("\n")[0]
            files = ", ".join(run.files_changed) or "no files listed"
            lines.append(f"- {run.planned_pulse_id} (commit {commit}): {subject} — {files}")
    lines += ["", "Your comments that were sent back to be fixed:"]
    lines += [f"- {comment_line(c)}" for c in fix_round.review.comments if c.comment_id in sent]
    kept = [c for c in fix_round.review.comments if c.comment_id not in sent]
    if kept:
        lines += ["", "Your comments the user did not send back (left as they were):"]
        lines += [f"- {comment_line(c)}" for c in kept]
    lines += ["", "Review the branch again: get_diff shows all of its changes against the base, these fixes "
              "included. Your review card starts empty. In complete_review's summary, say for each comment sent "
              "back whether it is resolved; comment again (add_line_comment, add_file_comment, add_review_comment) "
              "only on what is still wrong, or new. End with complete_review."]
    return "\n".join(lines)
