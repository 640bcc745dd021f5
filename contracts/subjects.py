"""Every NATS subject Autarch uses, defined in one place.

Requests go to ``autarch.svc.<service>.<verb>`` (one ``nats.micro`` endpoint per verb, queue
groups for load sharing). With the orchestrator split into P partitions (``orchestrator_partitions``), its
requests go to ``autarch.svc.orchestrator.p<k>.<verb>``, ``k`` the partition of the workflow, epic or loop
session the request names (:func:`orchestrator_request`). Events are published to the JetStream stream
``AUTARCH_EVENTS`` under ``autarch.events.<run>.<aggregate kind>.<aggregate id>.<event name>``: a fixed
number of tokens, so ``autarch.events.<run>.>`` follows exactly one run. A *run* owns an event stream, a branch and
a worktree: a workflow (its id) or a loop session (its id); ``_`` for none (a channel discussion). Live
token deltas go over core NATS (unpersisted) under ``autarch.deltas.<run>.<session>``.
"""

from __future__ import annotations

import uuid
import zlib
from typing import Any

__all__ = [
    "DELTAS_ALL",
    "EVENTS_ALL",
    "EVENTS_STREAM",
    "NO_WORKFLOW",
    "PARTITION_METADATA",
    "SERVICES",
    "TOOLS_CANCEL_FANOUT",
    "deltas",
    "event",
    "event_type_from_subject",
    "held",
    "mail",
    "orchestrator_partition",
    "orchestrator_request",
    "partition_of",
    "request",
    "routing_key",
    "run_events",
    "service_of",
    "storage",
]

EVENTS_STREAM = "AUTARCH_EVENTS"
"""The JetStream stream that distributes every recorded event."""

EVENTS_PREFIX = "autarch.events"
EVENTS_ALL = f"{EVENTS_PREFIX}.>"
DELTAS_PREFIX = "autarch.deltas"
DELTAS_ALL = f"{DELTAS_PREFIX}.>"
REQUEST_PREFIX = "autarch.svc"

NO_WORKFLOW = "_"
"""The run token for events that belong to no run, neither a workflow nor a loop session (channel discussions)."""

SERVICES = ("orchestrator", "tools", "git", "agent_runner", "indexer", "notifier")
"""The services ``autarch up`` runs; each registers a ``nats.micro`` service of this name."""

# Verbs, grouped by the service that answers them. A verb is added here before it is served.
ORCHESTRATOR_VERBS = (
    "create_workflow",
    "get_workflow",
    "list_workflows",
    "replay_workflow",
    "fork_workflow",
    "submit_scope",
    "submit_research",
    "submit_plan",
    "approve",
    "request_changes",
    "finish_execution",
    "get_artifacts",
    "take_note",
    "record_baseline",
    "get_scope_card",
    "add_review_comment",
    "complete_review",
    "stop_workflow",
    "resume_workflow",
    "abandon_workflow",
    "approve_extension",
    "answer_questions",
    "start_loop",
    "get_loop",
    "list_loops",
    "pause_loop",
    "resume_loop",
    "abort_loop",
    "fork_loop",
    "search_history",
    "list_beads",
    "get_bead",
    "ready_beads",
    "get_swarm",
    "create_bead",
    "edit_bead",
    "add_dependency",
    "close_bead",
    "bead_evidence",
    "bead_handoffs",
    "send_mail",
    "reply_mail",
    "fetch_inbox",
    "fetch_topic",
    "list_mail",
    "get_mail",
    "pending_mail",
    "mark_delivered",
)
TOOLS_VERBS = ("call", "list_tools", "file_access", "cancel")
GIT_VERBS = (
    "register_repository",
    "list_worktrees",
    "worktree_record",
    "create_workflow_branch",
    "get_workflow_branch",
    "start_pulse",
    "checkpoint_pulse",
    "recovery_checkpoint",
    "modified_tracked_files",
    "remove_worktree",
    "workflow_diff",
    "pulse_diff",
    "get_diff_artifact",
    "open_worker",
    "begin_bead",
    "commit_bead",
    "merge_bead",
    "sync_workflow_worktree",
    "close_worker",
    "write_worker_files",
)
AGENT_RUNNER_VERBS = ("start_session", "send_message", "stop_session", "get_session", "list_sessions",
                      "workflow_costs")
INDEXER_VERBS = ("index_project", "index_worktree", "index_status", "semantic_search", "record_turns", "find_turn",
                 "latest_turn", "search_turns", "turn_slice")
NOTIFIER_VERBS = ("list_deliveries",)

TOOLS_CANCEL_FANOUT = "autarch.tools.cancel"
"""Where a tools instance passes on a ``cancel`` of a call it does not run itself. Every instance
subscribes outside the queue group; only the one running the call answers."""


def indexer_progress(project_id: str) -> str:
    """Core-NATS subject of one project's indexing progress events (``IndexProgress``)."""
    return f"autarch.indexer.progress.{project_id}"


STORAGE_PREFIX = "autarch.storage"


def storage(service: str) -> str:
    """``autarch.storage.<service>``: the service's work waits for space, or goes on (``StorageNotice``, core
    NATS; the orchestrator halts and resumes the workflows it names)."""
    return f"{STORAGE_PREFIX}.{service}"


HELD_PREFIX = "autarch.held"


def held(service: str) -> str:
    """``autarch.held.<service>``: "which of these requests do you hold?", answered by every instance of the
    service that holds one (no queue group; see ``autarch.runtime.liveness``)."""
    return f"{HELD_PREFIX}.{service}"


def request(service: str, verb: str) -> str:
    """Subject of one request endpoint, e.g. ``autarch.svc.orchestrator.create_workflow``."""
    return f"{REQUEST_PREFIX}.{service}.{verb}"


ROUTING_FIELDS = ("workflow_id", "epic_id", "project_key", "run_id", "session_id")
"""The fields that name what an orchestrator request is about, in the order they are looked for: a workflow's id, an
epic's (a workflow's) id, a mailbox's project key (an epic's id), a run's id (a workflow or a loop session: an agent's
``take_note``), a loop session's id (a loop request's, and a loop iteration's ``search_history``). ``run_id`` stands
before ``session_id``: a request naming both is about the run, its ``session_id`` is the agent's. Every orchestrator
request carries one of them, except the lists, which are asked of every partition."""

PARTITION_METADATA = "partition"
"""``$SRV.PING``/``$SRV.INFO`` metadata key of an orchestrator instance: the partition it serves, ``"k/P"``."""

SCATTERED_VERBS = ("list_workflows", "list_loops")
"""Orchestrator verbs that name nothing: with several partitions each one answers for its own share."""


def routing_key(payload: Any) -> str | None:
    """What an orchestrator request is about (see :data:`ROUTING_FIELDS`); None for a list."""
    for name in ROUTING_FIELDS:
        value = getattr(payload, name, None)
        if isinstance(value, str):
            return value
    return None


def partition_of(key: str, partitions: int) -> int:
    """The partition (``0 … partitions-1``) that owns ``key``: a CRC-32 of the UUID's 16 bytes, so every spelling of
    one id lands in the same place; a key that is no UUID (the owner then answers ``not_found``) hashes as text."""
    if partitions <= 1:
        return 0
    try:
        data = uuid.UUID(key).bytes
    except ValueError:
        data = key.encode("utf-8", "surrogatepass")
    return zlib.crc32(data) % partitions


def orchestrator_partition(verb: str, partition: int, partitions: int) -> str:
    """Subject of ``verb`` at one orchestrator partition (``request("orchestrator", verb)`` when there is one)."""
    if partitions <= 1:
        return request("orchestrator", verb)
    return f"{REQUEST_PREFIX}.orchestrator.p{partition}.{verb}"


def orchestrator_request(verb: str, payload: Any, partitions: int) -> str:
    """Subject of an orchestrator request: the partition owning the workflow, epic or session it names."""
    key = routing_key(payload)
    return orchestrator_partition(verb, 0 if key is None else partition_of(key, partitions), partitions)


def service_of(subject: str) -> str | None:
    """The service a request subject names (``autarch.svc.<service>.<verb>``); None for any other subject."""
    prefix = f"{REQUEST_PREFIX}."
    if not subject.startswith(prefix):
        return None
    return subject[len(prefix):].split(".", 1)[0] or None


def event(run_id: str, aggregate_kind: str, aggregate_id: str, name: str) -> str:
    """Subject of one event of the run ``run_id`` (``Event.run_id``); ``name`` is the part of the event type after
    the colon."""
    return f"{EVENTS_PREFIX}.{run_id}.{aggregate_kind}.{aggregate_id}.{name}"


def run_events(run_id: str) -> str:
    """Wildcard subject matching every event of one run: a workflow's, or a loop session's."""
    return f"{EVENTS_PREFIX}.{run_id}.>"


def event_type_from_subject(subject: str) -> str:
    """Recover the seed-003 event type (``workflow:created``) from an event subject."""
    tokens = subject.split(".")
    return f"{tokens[3]}:{tokens[5]}"


def deltas(run_id: str, session_id: str) -> str:
    """Core-NATS subject of one agent session's live deltas; ``run_id`` the run the session serves."""
    return f"{DELTAS_PREFIX}.{run_id}.{session_id}"


MAIL_PREFIX = "autarch.mail"


def mail(epic_id: str, recipient: str) -> str:
    """Core-NATS subject of the notices to one recipient of an epic's mail (``MailNotice``): the runner holding
    that worker's session learns of a message at once (``*`` for ``recipient`` follows every recipient)."""
    return f"{MAIL_PREFIX}.{epic_id}.{recipient}"
