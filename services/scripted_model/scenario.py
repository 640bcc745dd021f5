"""The scenario format: what the scripted model answers, per agent role (and script) and step.

A scenario is plain data (msgspec Structs); :func:`parse_scenario` turns a JSON/TOML document into
one and refuses anything malformed with a message that names the bad field, e.g.
``demo.json: Object missing required field `name` - at `scripts["research"][1].content[0]```.
The format is described in ``docs/scripted-model.md``.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
from msgspec import Meta

__all__ = [
    "ERROR_STATUSES",
    "ROLES",
    "ContentBlock",
    "Failure",
    "RefusalDetails",
    "Scenario",
    "ScenarioError",
    "Step",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Usage",
    "bundled_scenario_path",
    "bundled_scenarios",
    "load_scenario",
    "parse_scenario",
    "split_key",
]

ROLES: tuple[str, ...] = ("discussion", "scoping", "research", "plan", "preflight", "pulsing", "review", "loop")
"""The agent roles a script may be written for (seed 003)."""

ERROR_STATUSES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
"""HTTP statuses a step may fail with, and the Anthropic error type each one carries."""

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"]
RefusalCategory = Literal["cyber", "bio", "frontier_llm", "reasoning_extraction", "general_harms"]
ToolName = Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]{1,128}$")]
ToolUseId = Annotated[str, Meta(pattern=r"^[a-zA-Z0-9_-]+$")]
NonNegative = Annotated[int, Meta(ge=0)]

_KEY = re.compile(r"^(?P<role>[a-z_]+)(?::(?P<script>[A-Za-z0-9_.-]+))?$")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the bad field."""


class TextBlock(msgspec.Struct, tag_field="type", tag="text", kw_only=True, forbid_unknown_fields=True):
    """Visible text the model writes."""

    text: str


class ThinkingBlock(msgspec.Struct, tag_field="type", tag="thinking", kw_only=True, forbid_unknown_fields=True):
    """Extended thinking; only sent when the request enables thinking, as the real API does.

    The signature is derived from the text (never written in the scenario) so the server can check
    that a client hands thinking blocks back intact.
    """

    thinking: str


class ToolUseBlock(msgspec.Struct, tag_field="type", tag="tool_use", kw_only=True, forbid_unknown_fields=True):
    """A tool call; ``id`` defaults to ``toolu_<role>[-<script>]_<step>_<n>`` (deterministic)."""

    name: ToolName
    input: dict[str, Any] = {}
    id: ToolUseId | None = None
    raw_input: str | None = None
    """Streamed verbatim as the call's ``input_json_delta`` text instead of ``input`` as JSON: arguments
    that are not valid JSON (or not an object), as a real model sometimes streams them. A non-streaming
    reply still carries ``input``."""


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


class Usage(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Token counts to report instead of the server's estimates; a field left out keeps the estimate."""

    input_tokens: NonNegative | None = None
    output_tokens: NonNegative | None = None
    cache_creation_input_tokens: NonNegative | None = None
    cache_read_input_tokens: NonNegative | None = None


class Failure(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One injected failure, the long form of a ``fail_first`` entry."""

    status: int
    """HTTP status (one of :data:`ERROR_STATUSES`)."""
    mid_stream: bool = False
    """On a streaming request: answer 200, stream part of the reply, then an ``error`` event."""
    message: str | None = None
    """The error message; a status-specific default when left out."""


class RefusalDetails(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The ``stop_details`` of a refused reply (``stop_reason: refusal``), as the API sends them."""

    category: RefusalCategory | None = None
    """The policy category that triggered the refusal; None when it maps to no named one."""
    explanation: str | None = None
    """A human-readable explanation; None when the API has none for the category."""


class Step(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One model reply: the answer to the request carrying as many assistant messages as the step's index."""

    content: list[ContentBlock]
    """The reply's content blocks, in order."""
    stop_reason: StopReason | None = None
    """Defaults to ``tool_use`` when a tool_use block is present, else ``end_turn``. ``max_tokens`` with a
    tool_use block last plays a reply cut inside that call: its arguments stop half way."""
    stop_details: RefusalDetails | None = None
    """With ``stop_reason: refusal`` only: the category and explanation the API gives (default: both null)."""
    usage: Usage | None = None
    """Token counts overriding the estimates."""
    fail_first: list[int | Failure] = []
    """Answer the first ``len(fail_first)`` attempts at this step with these errors, then succeed."""
    retry_after_ms: NonNegative | None = 1
    """``retry-after-ms`` / ``retry-after`` sent with an injected error; null sends none (client backoff)."""
    delay_ms: NonNegative = 0
    """Pause between streamed chunks (non-streaming replies wait as long as the whole stream would)."""
    latency_ms: NonNegative = 0
    """Wait before the reply starts (a model's time to first token): a fixed cost per call, whatever its size."""
    note: str | None = None
    """A comment for the scenario's reader; ignored."""

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUseBlock) for b in self.content) else "end_turn"


class Scenario(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A whole scenario: the scripts keyed ``<role>`` or ``<role>:<script>``."""

    scripts: dict[str, list[Step]]
    """Each key's steps; step *n* answers the request whose ``messages`` hold *n* assistant messages."""
    description: str = ""
    """What the scenario plays out, for its reader."""
    check_tools: bool = True
    """Refuse (400) a step that calls a tool the request does not offer, as a real model never would."""
    files: dict[str, str] = {}
    """The repository the script was written against (path → content), for tests and the demo to create."""
    context_window: Annotated[int, Meta(gt=0)] | None = None
    """Refuse (400 ``prompt is too long``) a request whose estimated input tokens exceed this; None: no limit."""
    recording: dict[str, Any] | None = None
    """What a recorded run did (``autarch workflow record``): its starting commit, the workflow's events, each
    session's tool results and the branch's trees. The server ignores it; ``autarch workflow compare`` checks a
    replay against it."""
    source: str = "<scenario>"
    """Where the scenario came from (file name or bundled name); set by the loader."""


class _ScenarioDocument(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    # The top level decoded first; each script is decoded on its own so an error can name its key.
    scripts: dict[str, list[Any]]
    description: str = ""
    check_tools: bool = True
    files: dict[str, str] = {}
    context_window: Annotated[int, Meta(gt=0)] | None = None
    recording: dict[str, Any] | None = None


def split_key(key: str) -> tuple[str, str | None]:
    """``"pulsing:pulse-2"`` → ``("pulsing", "pulse-2")``; ``"review"`` → ``("review", None)``."""
    role, _, script = key.partition(":")
    return role, script or None


def _relocate(exc: msgspec.ValidationError, where: str) -> str:
    # msgspec says "- at `$.x`" (or nothing for the root); point at the field inside the whole file instead.
    text = str(exc)
    if "- at `$" in text:
        return text.replace("- at `$", f"- at `{where}", 1)
    return f"{text} - at `{where}`"


def _check_key(key: str, source: str) -> None:
    match = _KEY.match(key)
    if match is None:
        raise ScenarioError(
            f"{source}: bad script key {key!r} - at `scripts`: use '<role>' or '<role>:<script>' "
            "(script: letters, digits, '_', '.', '-')"
        )
    if match["role"] not in ROLES:
        raise ScenarioError(
            f"{source}: unknown role {match['role']!r} in script key {key!r} - at `scripts`; "
            f"roles are {', '.join(ROLES)}"
        )


def _check_step(step: Step, where: str, source: str, seen_ids: dict[str, str]) -> None:
    if not step.content:
        raise ScenarioError(f"{source}: a step needs at least one content block - at `{where}.content`")
    has_tool_use = False
    for n, block in enumerate(step.content):
        if isinstance(block, ToolUseBlock):
            has_tool_use = True
            if block.id is not None:
                if block.id in seen_ids:
                    raise ScenarioError(
                        f"{source}: tool_use id {block.id!r} is used twice (first at `{seen_ids[block.id]}`) "
                        f"- at `{where}.content[{n}].id`"
                    )
                seen_ids[block.id] = f"{where}.content[{n}].id"
    if step.stop_reason == "tool_use" and not has_tool_use:
        raise ScenarioError(
            f"{source}: stop_reason 'tool_use' needs a tool_use block in content - at `{where}.stop_reason`"
        )
    if has_tool_use and step.stop_reason in ("end_turn", "stop_sequence", "pause_turn"):
        # A paused turn stops in a server tool's loop: a client tool call would have stopped it with tool_use.
        raise ScenarioError(
            f"{source}: a step with tool_use blocks cannot stop with {step.stop_reason!r} "
            f"(leave stop_reason out, or use 'tool_use', 'max_tokens' or 'refusal') - at `{where}.stop_reason`"
        )
    if step.stop_details is not None and step.stop_reason != "refusal":
        raise ScenarioError(
            f"{source}: stop_details go with stop_reason 'refusal' only - at `{where}.stop_details`"
        )
    for n, failure in enumerate(step.fail_first):
        status = failure.status if isinstance(failure, Failure) else failure
        if status not in ERROR_STATUSES:
            field = f"{where}.fail_first[{n}]" + (".status" if isinstance(failure, Failure) else "")
            raise ScenarioError(
                f"{source}: unsupported error status {status} - at `{field}`; "
                f"use one of {', '.join(map(str, ERROR_STATUSES))}"
            )


def parse_scenario(document: Mapping[str, Any] | str | bytes, *, source: str = "<scenario>") -> Scenario:
    """Build a :class:`Scenario` from a decoded document or JSON text.

    Args:
        document: the decoded JSON/TOML document, or JSON text.
        source: the name used in error messages and kept as ``Scenario.source``.

    Raises:
        ScenarioError: the document is malformed; the message names the bad field.
    """
    if isinstance(document, str | bytes):
        try:
            document = msgspec.json.decode(document)
        except msgspec.DecodeError as exc:
            raise ScenarioError(f"{source}: not valid JSON: {exc}") from None
    try:
        top = msgspec.convert(document, _ScenarioDocument)
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{source}: {str(exc).replace('- at `$.', '- at `')}") from None
    if not top.scripts:
        raise ScenarioError(f"{source}: `scripts` is empty; give at least one role's steps")
    scripts: dict[str, list[Step]] = {}
    seen_ids: dict[str, str] = {}
    for key, raw_steps in top.scripts.items():
        _check_key(key, source)
        steps = []
        for index, raw in enumerate(raw_steps):
            where = f'scripts["{key}"][{index}]'
            if isinstance(raw, str):
                # Shorthand: a bare string is a reply holding one text block.
                raw = {"content": [{"type": "text", "text": raw}]}
            try:
                step = msgspec.convert(raw, Step)
            except msgspec.ValidationError as exc:
                raise ScenarioError(f"{source}: {_relocate(exc, where)}") from None
            _check_step(step, where, source, seen_ids)
            steps.append(step)
        if not steps:
            raise ScenarioError(f'{source}: script has no steps - at `scripts["{key}"]`')
        scripts[key] = steps
    return Scenario(
        scripts=scripts, description=top.description, check_tools=top.check_tools, files=top.files,
        context_window=top.context_window, recording=top.recording, source=source,
    )


def bundled_scenarios() -> list[str]:
    """Names of the example scenarios shipped with the package (``demo``, ``faults``, …)."""
    folder = resources.files(__package__) / "scenarios"
    return sorted(p.name.removesuffix(".json") for p in folder.iterdir() if p.name.endswith(".json"))


def bundled_scenario_path(name: str) -> Path:
    """The file of a bundled example scenario.

    Raises:
        ScenarioError: no bundled scenario has that name.
    """
    path = Path(str(resources.files(__package__) / "scenarios" / f"{name}.json"))
    if not path.is_file():
        raise ScenarioError(f"no bundled scenario {name!r}; bundled: {', '.join(bundled_scenarios())}")
    return path


def load_scenario(path_or_name: str | Path) -> Scenario:
    """Load a scenario from a ``.json`` or ``.toml`` file, or a bundled one by name (``"demo"``).

    Raises:
        ScenarioError: the file is missing, unreadable or malformed.
    """
    path = Path(path_or_name)
    if not path.exists() and isinstance(path_or_name, str) and re.fullmatch(r"[\w-]+", path_or_name):
        path = bundled_scenario_path(path_or_name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario {str(path)!r}: {exc.strerror or exc}") from None
    source = path.name
    if path.suffix == ".toml":
        try:
            document: Any = tomllib.loads(data.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ScenarioError(f"{source}: not valid TOML: {exc}") from None
        return parse_scenario(document, source=source)
    return parse_scenario(data, source=source)
