"""What every flavour of ``autarch demo`` shares: what it plays (:class:`DemoKind`), its error, its sample repository.

The workflow demo (``demo_cmd``), the swarm one (``demo_swarm``) and the loop one (``demo_loop``) each build on
this; ``demo_cmd`` is the command that picks one.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .gateway_client import CliError, GatewayClient

__all__ = ["BRANCH", "REQUEST", "SCENARIO", "TITLE", "DemoError", "DemoKind", "check_target", "git_in",
           "make_sample_repo"]

SCENARIO = "demo"
TITLE = "Greet the world"
REQUEST = "Make greet() greet the world when the name is empty"
BRANCH = "autarch/demo"


@dataclass(frozen=True)
class DemoKind:
    """What one flavour of the workflow demo plays: the scenario, the workflow it creates, the system's settings."""

    scenario: str = SCENARIO
    """The bundled scenario the scripted model plays (its files make the sample repository)."""
    title: str = TITLE
    request: str = REQUEST
    branch: str = BRANCH
    headline: str = "a whole workflow"
    env: Mapping[str, str] = field(default_factory=dict)
    """Settings for the system (``AUTARCH_*``), beside the demo's own."""
    unit: str = "pulse"
    """What one commit on the branch stands for."""
    epilogue: Callable[[GatewayClient, str], list[str]] | None = None
    """Lines to print after the branch's log of a completed workflow (given the client and the workflow id)."""


class DemoError(CliError):
    """The demo cannot go on; ``exit_code`` 2: bad usage, 1: a failure."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message, exit_code=code)


def git_in(repo: Path, *args: str) -> str:
    """``git args`` run in ``repo``; its output (a failure is a :class:`DemoError`)."""
    # A user's git configuration must not break the demo: no signing, no hooks, a fixed identity.
    cmd = ["git", "-C", str(repo), "-c", "user.name=Autarch demo", "-c", "user.email=demo@autarch.invalid",
           "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise DemoError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def check_target(target: Path) -> None:
    """Refuse (exit code 2) a target that exists and is not an empty directory."""
    if target.exists() and not target.is_dir():
        raise DemoError(f"{target} exists and is not a directory; choose another --dir", code=2)
    if target.is_dir() and any(target.iterdir()):
        raise DemoError(f"{target} exists and is not empty; choose a new or empty directory with --dir", code=2)


def make_sample_repo(root: Path, files: Mapping[str, str]) -> str:
    """A git repository at ``root`` on branch ``main`` holding ``files`` in one commit; its commit id."""
    root.mkdir(parents=True, exist_ok=True)
    for path, content in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    git_in(root, "init", "-q", "-b", "main")
    git_in(root, "add", "-A")
    git_in(root, "commit", "-q", "-m", "Initial commit: the greeter sample")
    return git_in(root, "rev-parse", "HEAD").strip()
