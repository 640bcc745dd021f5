"""The Session aggregate: read this file and you know every event an agent session can record.

Session → Turn → model replies (content blocks, thinking signatures included), tool calls (input,
output, duration, error) and thoughts. The turn loop is a deterministic function of these events:
everything a restarted runner needs to carry a turn on is in them, and nothing else is.
"""

from __future__ import annotations

import bisect
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar
from uuid import UUID

import msgspec
from eventsourcing.domain import Aggregate, event

from autarch.contracts.agents import COMPLETION_REJECTED, Baseline, TurnOutcome, TurnUsage
from autarch.contracts.beads import VerificationEvidence, WorkerDiscipline
from autarch.contracts.tool_catalog import Role

__all__ = ["GivenMail", "Memo", "Reply", "Session", "ToolCall", "Turn", "add_usage", "run_started"]


def add_usage(total: TurnUsage, usage: TurnUsage) -> None:
    """Add ``usage`` into ``total`` in place."""
    total.input_tokens += usage.input_tokens
    total.output_tokens += usage.output_tokens
    total.cache_read_input_tokens += usage.cache_read_input_tokens
    total.cache_creation_input_tokens += usage.cache_creation_input_tokens


def run_started(started: Any) -> str | None:
    """The run a recorded ``Session.Started`` names: ``run_id``, or ``workflow_id`` in one recorded before issue 33
    (which has no ``run_id``)."""
    return getattr(started, "run_id", None) or getattr(started, "workflow_id", None)


class Memo:
    """One value derived from a session's compacted turns, kept between model requests with the key it was made
    for (the digest: ``compaction.session_digest``).

    Not the session's state: the session clears it whenever an event changes a compacted turn (:meth:`Session._turn`),
    and it compares equal to any other memo, so two sessions with the same events are equal whatever either holds.
    """

    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.value: Any = None

    def clear(self) -> None:
        self.key = self.value = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Memo)

    __hash__ = None  # type: ignore[assignment]  # mutable, and equal to every other memo


class ToolCall(msgspec.Struct, kw_only=True):
    """One ``tool_use`` of a model reply and, once known, its result."""

    tool_use_id: str
    name: str
    input: Any
    step: int
    """The model reply (0-based within the turn) that asked for it."""
    started: bool = False
    output: str | None = None
    is_error: bool = False
    duration_ms: float = 0.0
    replayed: bool = False

    @property
    def done(self) -> bool:
        return self.output is not None


class Reply(msgspec.Struct, kw_only=True):
    """One recorded model reply."""

    content: list[dict[str, Any]]
    """The reply's content blocks as the model API gave them (thinking signatures included)."""
    stop_reason: str | None
    usage: TurnUsage
    cost_usd: float
    model: str
    ending_id: str | None
    """The ``tool_use`` that validly ends the turn, if any."""
    tool_calls: list[ToolCall]

    @property
    def context_tokens(self) -> int:
        """Tokens the request that produced this reply carried (what counts against the context window)."""
        u = self.usage
        return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens


class GivenMail(msgspec.Struct, kw_only=True):
    """Coordination mail pushed into a turn: the text block the user message carries before reply ``step``."""

    step: int
    text: str

    def block(self) -> dict[str, Any]:
        """The content block as the model is sent it."""
        return {"type": "text", "text": self.text}


class Turn(msgspec.Struct, kw_only=True):
    """One user message and everything the agent did about it."""

    turn_id: str
    index: int
    text: str
    notes: list[str]
    message_id: str | None
    started_at: datetime
    replies: list[Reply] = []
    calls: dict[str, ToolCall] = {}
    violations: list[str] = []
    usage: TurnUsage = msgspec.field(default_factory=TurnUsage)
    cost_usd: float = 0.0
    outcome: TurnOutcome | None = None
    completed_at: datetime | None = None
    elided_through: int = -1
    """The last reply whose long tool results are sent as stubs (in-turn compaction; -1: none)."""
    mail: list[GivenMail] = []
    """Coordination mail pushed into this turn, in the order given."""
    evidence: dict[str, VerificationEvidence] = {}
    """``complete_pulse`` tool_use id → the verification the runner ran for it (a worker's session)."""

    @property
    def running(self) -> bool:
        return self.outcome is None


class Session(Aggregate):
    """An agent session of one role, tied to a run (a workflow stage, a loop iteration) or a channel."""

    if TYPE_CHECKING:
        # The event classes the @event decorators below create when the class is built (mypy cannot see them).
        Started: ClassVar[type[Any]]
        TurnStarted: ClassVar[type[Any]]
        BlockRejected: ClassVar[type[Any]]
        ToolStarted: ClassVar[type[Any]]
        ToolCompleted: ClassVar[type[Any]]
        TurnCompleted: ClassVar[type[Any]]
        ErrorRecorded: ClassVar[type[Any]]
        Closed: ClassVar[type[Any]]

    @staticmethod
    def create_id(session_id: str, **_: object) -> UUID:
        # The caller chooses the id (a UUID) so that a retried start is recognised, not doubled.
        return UUID(session_id)

    @event("Started")
    def __init__(self, baselines: list[dict[str, Any]] | None = None, lease_holder: str | None = None,
                 discipline: dict[str, Any] | None = None, run_id: str | None = None,
                 workflow_id: str | None = None, *,
                 session_id: str, role: Role, model: str, root: str,
                 channel_id: str | None, script: str | None, notes: list[str]) -> None:
        # ``baselines``, ``lease_holder`` and ``discipline`` came later. They stand before the ``*`` because
        # eventsourcing treats every keyword-only parameter as required, default or not; as parameters with a
        # default they may be left out, and a Started event recorded before they existed (no such key) is applied
        # with the default (tests/agent_runner/test_completion_rules.py and test_lease_renewal.py load such events).
        # ``run_id`` was ``workflow_id`` before issue 33 (it may be a loop session's id): a Started recorded then
        # has only ``workflow_id``, which is read as the run; new ones record ``run_id`` and leave it None
        # (tests/agent_runner/test_old_sessions.py).
        self.role = role
        self.model = model
        self.root = root
        self.run_id = run_id if run_id is not None else workflow_id
        """The workflow or loop session the session works for; None for a channel discussion."""
        self.channel_id = channel_id
        self.script = script
        self.stage_notes = list(notes)
        """Notes of this stage the caller handed over (taken by earlier sessions)."""
        self.baselines = msgspec.convert(baselines or [], list[Baseline])
        """Known issues preflight recorded: a failed command that only repeats them is not a failure."""
        self.lease_holder = lease_holder
        """A swarm worker's registered name: on every tool call, and whose file leases its turns renew."""
        self.discipline = msgspec.convert(discipline, WorkerDiscipline) if discipline else None
        """A swarm worker's rules (verification at close, TDD's red first): see ``discipline.py``."""
        self.reread_needed = False
        """A worker's context was compacted since it last read its bead file: edits wait for a re-read."""
        self.turns: list[Turn] = []
        self.compacted_through = -1
        self.digest_tokens: int | None = None
        """The digest's budget the last ``Compacted`` recorded (None: recorded before digests had one)."""
        self.digest_memo = Memo()
        """The digest of the compacted turns, made once per compaction rather than at every request (it walks every
        compacted turn): see ``compaction.session_digest``."""
        self.closed_reason: str | None = None
        self.usage = TurnUsage()
        self.cost_usd = 0.0
        self.completion_rejections = 0
        self.mail_received: set[str] = set()
        """Ids of the coordination messages this session has been given (each only once)."""
        self.message_turns: dict[str, str] = {}
        """``send_message``'s ``message_id`` → the turn it opened (the first one: a repeat is answered with it)."""
        self._notes: list[tuple[tuple[int, int], str]] = []
        """The notes :meth:`session_notes` lists, each under (turn index, the call's place in its turn), in that
        order: kept as the calls complete rather than gathered from every turn at each message."""

    # --- turns -----------------------------------------------------------------------------------------

    @event("TurnStarted")
    def start_turn(self, *, turn_id: str, index: int, text: str, notes: list[str], message_id: str | None,
                   stage_notes: list[str] | None, at: datetime) -> None:
        """A user message opens a turn; ``notes`` is what is injected into it (stage notes and this session's)."""
        if stage_notes is not None:
            self.stage_notes = list(stage_notes)
        if message_id is not None:
            self.message_turns.setdefault(message_id, turn_id)
        self.turns.append(
            Turn(turn_id=turn_id, index=index, text=text, notes=list(notes), message_id=message_id,
                 started_at=at)
        )

    @event("ModelReplied")
    def record_reply(self, *, turn_id: str, content: list[dict[str, Any]], stop_reason: str | None,
                     usage: dict[str, int], cost_usd: float, model: str, ending_id: str | None) -> None:
        """The full reply of one model call, recorded before anything acts on it.

        ``ending_id`` is the ``tool_use`` that validly ends the turn (a block tool, or ``complete_review``).
        """
        turn = self._turn(turn_id)
        step = len(turn.replies)
        calls = []
        for block in content:
            if block.get("type") == "tool_use":
                call = ToolCall(tool_use_id=block["id"], name=block["name"], input=block.get("input"), step=step)
                turn.calls[call.tool_use_id] = call
                calls.append(call)
        reply_usage = TurnUsage(**usage)
        turn.replies.append(Reply(content=content, stop_reason=stop_reason, usage=reply_usage, cost_usd=cost_usd,
                                  model=model, ending_id=ending_id, tool_calls=calls))
        for total in (turn.usage, self.usage):
            add_usage(total, reply_usage)
        turn.cost_usd += cost_usd
        self.cost_usd += cost_usd

    @event("BlockRejected")
    def reject_block(self, *, turn_id: str, tool_use_id: str, name: str, rule: str, message: str) -> None:
        """A block tool broke a rule (or its arguments were invalid); ``message`` is the model's error result."""
        turn = self._turn(turn_id)
        call = turn.calls[tool_use_id]
        call.output, call.is_error = message, True
        turn.violations.append(f"{call.name}: {rule}")
        if rule == COMPLETION_REJECTED:
            self.completion_rejections += 1

    @event("VerificationRecorded")
    def record_verification(self, *, turn_id: str, tool_use_id: str, evidence: dict[str, Any],
                            refusal: str | None) -> None:
        """The runner verified a worker's ``complete_pulse``; a ``refusal`` (it failed) keeps the turn going."""
        turn = self._turn(turn_id)
        # The event keeps the evidence's wire payload as recorded; the state is typed.
        turn.evidence[tool_use_id] = msgspec.convert(evidence, VerificationEvidence)
        if refusal is not None:
            call = turn.calls[tool_use_id]
            call.output, call.is_error = refusal, True
            turn.violations.append(f"{call.name}: verification_failed")
            for reply in turn.replies:
                if reply.ending_id == tool_use_id:
                    reply.ending_id = None

    @event("MailReceived")
    def receive_mail(self, *, turn_id: str, step: int, message_ids: list[str], block: dict[str, Any]) -> None:
        """Coordination mail given to the worker: ``block`` goes into the user message before reply ``step``."""
        self._turn(turn_id).mail.append(GivenMail(step=step, text=block["text"]))
        self.mail_received.update(message_ids)

    @event("ToolStarted")
    def start_tool(self, *, turn_id: str, tool_use_id: str, name: str, input: Any) -> None:
        """The runner is about to run this tool call (it may run again after a crash; the tools service dedupes)."""
        self._turn(turn_id).calls[tool_use_id].started = True

    @event("ToolCompleted")
    def complete_tool(self, *, turn_id: str, tool_use_id: str, name: str, output: str, is_error: bool,
                      duration_ms: float, replayed: bool) -> None:
        """A tool call's result, exactly as the model will be given it."""
        turn = self._turn(turn_id)
        call = turn.calls[tool_use_id]
        call.output, call.is_error, call.duration_ms, call.replayed = output, is_error, duration_ms, replayed
        if call.name == "take_note":
            self._note_taken(turn, call)
        d = self.discipline
        if (d is not None and d.bead_file and name == "read_file" and not is_error and isinstance(call.input, dict)
                and str(call.input.get("path", "")).removeprefix("./") == d.bead_file.removeprefix("./")):
            self.reread_needed = False

    @event("Compacted")
    def compact(self, digest_tokens: int | None = None, *, turn_id: str, through: int, context_tokens: int) -> None:
        """From now on, turns up to index ``through`` are sent to the model as a digest of at most
        ``digest_tokens`` (recorded rather than read from settings, so a replay builds the same digest).

        ``digest_tokens`` came later and stands before the ``*`` for the reason given at ``__init__``: a
        ``Compacted`` event recorded before it existed is applied with None (every turn listed in full).
        """
        self.compacted_through = through
        self.digest_tokens = digest_tokens
        # A worker whose context was just summarised re-reads its bead (and its decisions) before any edit.
        self.reread_needed = self.discipline is not None and bool(self.discipline.bead_file)

    @event("TurnCompleted")
    def complete_turn(self, *, turn_id: str, outcome: dict[str, Any], at: datetime, text: str, thoughts: str,
                      usage: dict[str, int], cost_usd: float, tool_calls: int, model_calls: int) -> None:
        """The turn ended: ``outcome`` is a :class:`~autarch.contracts.agents.TurnOutcome` as a dict.

        The text, thoughts and totals are derivable from the turn's events; they are recorded here too so
        that ``turn:completed`` is complete on its own for every consumer of the stream.
        """
        turn = self._turn(turn_id)
        # The event keeps the outcome as recorded (with what only the wire event reads, ``partial_text``);
        # the state is the typed outcome.
        turn.outcome = msgspec.convert(outcome, TurnOutcome)
        turn.completed_at = at

    # --- the session -----------------------------------------------------------------------------------

    @event("ErrorRecorded")
    def record_error(self, *, turn_id: str | None, message: str) -> None:
        """A failure the model cannot fix (the model API refused the request, a bug)."""

    @event("Closed")
    def close(self, *, reason: str) -> None:
        """The session takes no more messages."""
        self.closed_reason = reason

    # --- queries ---------------------------------------------------------------------------------------

    def _turn(self, turn_id: str) -> Turn:
        """The turn an event changes (every event on a turn finds it here)."""
        # Turns are appended in order and the running one is nearly always the last.
        for turn in reversed(self.turns):
            if turn.turn_id == turn_id:
                if turn.index <= self.compacted_through:
                    # A compacted turn has ended and nothing records on it again; were something to, the digest
                    # made of it is made anew rather than sent stale.
                    self.digest_memo.clear()
                return turn
        raise KeyError(f"no turn {turn_id} in session {self.id}")

    @property
    def current_turn(self) -> Turn | None:
        """The running turn, if any."""
        if self.turns and self.turns[-1].running:
            return self.turns[-1]
        return None

    @property
    def closed(self) -> bool:
        return self.closed_reason is not None

    def session_notes(self) -> list[str]:
        """Notes this session took with ``take_note`` (successful calls only), in the order of the turns and, within
        a turn, of the calls."""
        return [note for _, note in self._notes]

    def _note_taken(self, turn: Turn, call: ToolCall) -> None:
        """A ``take_note`` call got its result: its note is listed, in its place, if the call succeeded."""
        place = (turn.index, list(turn.calls).index(call.tool_use_id))
        at = bisect.bisect_left(self._notes, place, key=lambda entry: entry[0])
        if at < len(self._notes) and self._notes[at][0] == place:
            del self._notes[at]  # a result recorded again replaces the first
        note = call.input.get("note") if isinstance(call.input, dict) else None
        if call.done and not call.is_error and isinstance(note, str) and note.strip():
            self._notes.insert(at, (place, note))

    def last_context_tokens(self) -> int:
        """Context size of the most recent model request (0 before the first)."""
        for turn in reversed(self.turns):
            if turn.replies:
                return turn.replies[-1].context_tokens
        return 0

    # --- in-turn compaction ----------------------------------------------------------------------------

    @event("ResultsElided")
    def elide_results(self, *, turn_id: str, through_step: int, context_tokens: int) -> None:
        """From now on, the long tool results of this turn's replies ``0..through_step`` are sent as stubs.

        One long turn outgrew the context window with no older turn left to compact. The turn keeps it as
        ``elided_through``.
        """
        self._turn(turn_id).elided_through = through_step
        self.reread_needed = self.discipline is not None and bool(self.discipline.bead_file)
