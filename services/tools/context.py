"""What a tool handler gets: the call, its confined worktree, the session store and the gates."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nats.aio.client import Client

from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.tool_catalog import SUCCESS_SHAPED_TOOLS
from autarch.contracts.tools import ToolCall
from autarch.runtime.errors import RemoteError
from autarch.runtime.leases import LeaseTable
from autarch.runtime.requests import request

from .egress import EgressPolicy
from .gitrecord import GitRecords
from .grep_pool import GrepEngine
from .paths import Worktree
from .sandbox import SandboxPolicy
from .sandbox_client import LaunchServer
from .sensitivity import Redactor
from .store import SessionStore

__all__ = ["Forwarder", "Handler", "ToolContext", "ToolSettings", "failure"]

T = TypeVar("T")


@dataclass(frozen=True)
class ToolSettings:
    """The settings tools need (built from :class:`autarch.runtime.settings.ToolsSettings`)."""

    exa_api_key: str | None = None
    exa_base_url: str = "https://api.exa.ai"
    shell_output_chars: int = 512
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    """What an agent's commands may reach (``shell``, preflight commands)."""
    egress: EgressPolicy = field(default_factory=EgressPolicy)
    """What a preflight command reaches through the registry proxy, and the machine's registry configuration."""


class Forwarder:
    """Sends the typed commands of tools whose effect belongs to another service."""

    OPTIONAL = frozenset({"indexer"})
    """Services an installation may run without: their absence is answered at once, not waited out."""

    def __init__(self, nc: Client | None, *, timeout: float = 10.0, restart_grace: float = 15.0,
                 orchestrator_partitions: int = 1) -> None:
        self.nc = nc
        self.timeout = timeout
        self.orchestrator_partitions = orchestrator_partitions
        """The orchestrator's partitions: a command goes to the one owning its workflow, epic or session."""
        # Every forwarded command carries an idempotency key, so asking again is safe: an owner that is
        # restarting (a crash, a deploy) answers a moment later instead of failing the agent's tool call.
        self.restart_grace = restart_grace

    async def send(self, service: str, verb: str, payload: Any, reply_type: type[T], *,
                   timeout: float | None = None) -> T:
        """The owner's typed reply; :class:`RemoteError` (``unavailable`` without a connection) otherwise.

        ``timeout``: for a command the owner may take long to answer (it waits on purpose); default the
        forwarder's."""
        subject = (subjects.orchestrator_request(verb, payload, self.orchestrator_partitions)
                   if service == "orchestrator" else subjects.request(service, verb))
        if self.nc is None or not self.nc.is_connected:
            raise RemoteError(
                ErrorReply(code=ErrorCode.UNAVAILABLE, message=f"not connected to NATS; no {service} to ask"),
                subject=subject,
            )
        grace = 0.0 if service in self.OPTIONAL else self.restart_grace
        # Idempotent (keyed commands and queries): an owner instance killed mid-request is noticed and the
        # command sent again, instead of the tool call failing at the timeout.
        return await request(self.nc, subject, payload, reply_type, timeout=timeout or self.timeout,
                             retry_unavailable=grace,
                             idempotent=True)


@dataclass
class ToolContext:
    """Everything one tool call may use."""

    call: ToolCall
    variant: str
    """The description variant of the tool for the caller's role (``pulsing``, ``preflight``, ``base``, …)."""
    worktree: Worktree
    store: SessionStore
    engine: GrepEngine
    forwarder: Forwarder
    redactor: Redactor
    settings: ToolSettings
    leases: LeaseTable | None = None
    """The swarm's lease table, checked for calls with a ``lease_holder`` (None: not connected to NATS)."""
    launcher: LaunchServer | None = None
    """Starts confined commands (None: each is started by a launcher process of its own)."""
    git_records: GitRecords | None = None
    """Where each worktree's repository is, from Autarch's records (None: nowhere; host-side git refuses)."""

    @property
    def idempotency_key(self) -> str:
        return f"{self.call.session_id}:{self.call.tool_call_id}"


Handler = Callable[[ToolContext, Any], Awaitable[Any]]


def failure(tool: str, message: str, **extra: Any) -> dict[str, Any]:
    """The seed's error shape for ``tool``: ``{success: false, error}`` or ``{error}``."""
    if tool in SUCCESS_SHAPED_TOOLS:
        return {"success": False, "error": message, **extra}
    return {"error": message, **extra}
