"""The Telegram command that starts a loop session, and what the bot answers.

Grammar (one message): ``/pulse <project> <goal>``. ``<project>`` is the directory name of one of the
``notify_telegram_projects`` repositories (or that path as listed); ``<goal>`` is the rest of the message, several
lines allowed. ``/pulse@<bot name>`` works as ``/pulse`` (how Telegram spells a command in a group). ``/help`` and
``/start`` answer the usage; another command, or ``/pulse`` without a known project and a goal, answers the usage
with what was wrong. A message that is not a command (no leading ``/``) is not answered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from autarch.contracts.loops import LoopView

__all__ = [
    "MAX_ITERATIONS",
    "Start",
    "Usage",
    "parse",
    "projects_of",
    "refused_text",
    "start_failed_text",
    "started_text",
    "usage_text",
]

MAX_ITERATIONS = 10
"""Iterations a session started from Telegram may take (seed 001's default)."""


@dataclass(frozen=True)
class Start:
    """A well-formed ``/pulse``: start a session on ``project_path`` towards ``goal``."""

    project_name: str
    project_path: str
    goal: str


@dataclass(frozen=True)
class Usage:
    """Answer with the usage; ``problem`` says what was wrong (None: the usage was asked for)."""

    problem: str | None = None


def projects_of(paths: tuple[str, ...]) -> dict[str, str]:
    """The projects a command may name: directory name → path (the settings refuse two of one name)."""
    return {Path(path).name: path for path in paths}


def parse(text: str, projects: dict[str, str]) -> Start | Usage | None:
    """What the message ``text`` asks for; None when it is no command."""
    if not text.startswith("/"):
        return None
    head, _, rest = text.partition("\n")
    words = head.split(maxsplit=2)
    command = words[0].split("@", 1)[0].lower()
    if command in ("/help", "/start"):
        return Usage()
    if command != "/pulse":
        return Usage(f"Unknown command {words[0][:64]}.")
    if len(words) < 2:
        return Usage("Name a project and a goal.")
    project = words[1]
    name = project if project in projects else next((n for n, p in projects.items() if p == project), None)
    if name is None:
        return Usage(f"Unknown project {project[:200]}.")
    goal = "\n".join(part for part in (words[2] if len(words) > 2 else "", rest) if part).strip()
    if not goal:
        return Usage("Give the goal after the project.")
    return Start(project_name=name, project_path=projects[name], goal=goal)


def usage_text(usage: Usage, projects: dict[str, str]) -> str:
    known = ", ".join(sorted(projects)) or "none configured (notify_telegram_projects)"
    lines = [usage.problem] if usage.problem else []
    lines += ["Usage: /pulse <project> <goal>",
              f"Starts a loop session on <project> working towards <goal> (at most {MAX_ITERATIONS} iterations); "
              "its notifications come to this chat.",
              f"Projects: {known}"]
    return "\n".join(lines)


def refused_text(chat_id: str) -> str:
    return (f"⛔ This chat (id {chat_id}) may not start loop sessions: it is not one of the notifier's "
            "notify_telegram_allowed_chats.")


def started_text(view: LoopView) -> str:
    return (f"▶️ Session {view.id} started on {view.project_name} (branch {view.branch_name}, at most "
            f"{view.max_iterations} iterations): {view.goal}")


def start_failed_text(start: Start, code: str, message: str) -> str:
    return f"❌ Could not start a session on {start.project_name}: {code}: {message}"
