"""Typed settings: what every process shares, and one type per service holding only what it reads.

Sources, later ones winning: defaults, the TOML file (``AUTARCH_CONFIG`` or
``<data dir>/config.toml``), ``AUTARCH_<FIELD>`` environment variables, command-line flags.
One loader (:func:`load_settings`) builds the aggregate :class:`Settings` the CLI and the supervisor use;
a service gets its own view (:meth:`Settings.for_service`, :func:`narrow`), e.g. :class:`ToolsSettings`.
Every field name is unique across the types, so ``AUTARCH_<FIELD>`` names exactly one setting.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

__all__ = [
    "SECRET_SETTINGS",
    "SERVICE_SETTINGS",
    "AgentRunnerSettings",
    "CommonSettings",
    "GatewaySettings",
    "GitSettings",
    "IndexerSettings",
    "NotifierSettings",
    "OrchestratorSettings",
    "Settings",
    "SettingsError",
    "ToolsSettings",
    "load_settings",
    "narrow",
]


def _default_data_dir(environ: Mapping[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or str(Path.home())
    base = environ.get("XDG_DATA_HOME") or str(Path(home) / ".local" / "share")
    return str(Path(base) / "autarch")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the setting."""


def _check_port(name: str, value: int) -> None:
    if not 0 < value < 65536:
        raise SettingsError(f"{name} must be between 1 and 65535, got {value}")


class CommonSettings(msgspec.Struct, kw_only=True):
    """What every process reads: where data lives, how to reach NATS, timeouts, the event stream."""

    data_dir: str = msgspec.field(default_factory=_default_data_dir)
    """Where event stores, worktrees, the token and the embedded NATS server's storage live."""
    nats_url: str | None = None
    """An existing NATS server to use; unset means ``autarch up`` starts an embedded one."""
    nats_port: int = 4333
    """Port of the embedded NATS server (loopback only)."""
    postgres_url: str | None = None
    """``postgresql://user:pass@host:port/db``: event stores in PostgreSQL instead of SQLite."""
    request_timeout: float = 10.0
    """Seconds a service request may take before the caller gets a ``timeout`` error."""
    log_level: str = "INFO"
    """Level of the log lines every process writes on stderr."""
    stream_replicas: int = 1
    """Replicas of the ``AUTARCH_EVENTS`` stream (3 on a three-node JetStream cluster)."""
    duplicate_window: float = 3600.0
    """Seconds JetStream remembers ``Nats-Msg-Id`` values: a relay restarted within it never publishes twice."""
    sqlite_synchronous: Literal["normal", "full"] = "normal"
    """SQLite event stores: ``normal`` commits without waiting for the disk (a commit survives any process crash)
    and the relay syncs the log once per batch before publishing, so nothing on the stream can be lost; ``full``
    also waits for the disk at every commit (survives power loss before the relay's sync; about five times slower)."""
    lease_ttl: float = 30.0
    """Seconds a swarm worker's file lease lives without renewal: a worker that dies loses its files this long after."""
    instance: str = ""
    """This process's name among several instances of its service (``autarch up --cluster`` sets it, e.g.
    ``orchestrator-2``); empty: the only instance. A stateful service with a name runs only while it holds its
    service's leader lease (see ``runtime/standby.py``); the others wait as hot standbys."""
    orchestrator_partitions: int = 1
    """Partitions the orchestrator's workflows, epics and loop sessions are split into (by a hash of their id), each
    served by the one orchestrator instance holding its lease, so several instances work at once. Every process
    must agree on it: callers route each request to its partition (``autarch.svc.orchestrator.p<k>.<verb>``)."""
    loop_max_iterations_limit: int = 200
    """Largest ``maxIterations`` a loop session may be started with: the orchestrator refuses more, and the
    gateway's API document states it as the field's maximum (so every process must agree on it)."""
    leader_ttl: float = 15.0
    """Seconds a leader lease (a stateful service's, a relay's) lives without renewal: how long a standby waits to
    take over from a leader killed without releasing it. A leader steps down after 80 % of it without a renewal, so
    it must outlast a JetStream leader election after a NATS node dies (measured up to ~7 s on a loaded 2-core box)."""

    def __post_init__(self) -> None:
        _check_port("nats_port", self.nats_port)
        if self.request_timeout <= 0:
            raise SettingsError(f"request_timeout must be positive, got {self.request_timeout}")
        if self.lease_ttl <= 0:
            raise SettingsError(f"lease_ttl must be positive, got {self.lease_ttl}")
        if self.leader_ttl <= 0:
            raise SettingsError(f"leader_ttl must be positive, got {self.leader_ttl}")
        if self.loop_max_iterations_limit < 1:
            raise SettingsError(f"loop_max_iterations_limit must be 1 or more, got {self.loop_max_iterations_limit}")
        if not 1 <= self.orchestrator_partitions <= MAX_PARTITIONS:
            raise SettingsError(f"orchestrator_partitions must be between 1 and {MAX_PARTITIONS}, "
                                f"got {self.orchestrator_partitions}")

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    @property
    def token_path(self) -> Path:
        return self.data_path / "token"

    @property
    def effective_nats_url(self) -> str:
        return self.nats_url or f"nats://127.0.0.1:{self.nats_port}"


MAX_PARTITIONS = 64
"""Most orchestrator partitions: each is a lease, a set of endpoints and a turn consumer per instance."""


class GatewaySettings(CommonSettings, kw_only=True):
    """The gateway's settings (the CLI reads ``host``, ``port`` and ``sse_keepalive`` too)."""

    host: str = "127.0.0.1"
    """Interface the gateway listens on."""
    port: int = 8765
    """Port of the gateway (HTTP API and SSE)."""
    sse_keepalive: float = 15.0
    """Seconds between SSE keep-alive comments when no event flows."""
    expected_services: tuple[str, ...] = ("orchestrator",)
    """Services ``/health/ready`` waits for (env: comma-separated); ``autarch up`` sets it to those it starts."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_port("port", self.port)


class OrchestratorSettings(CommonSettings, kw_only=True):
    """The orchestrator's settings: how it drives workflows and loop sessions."""

    git_request_timeout: float = 120.0
    """Seconds the orchestrator waits for a git step (a branch, a checkpoint of a large tree) before retrying it."""
    drive_workflows: bool = True
    """The orchestrator starts the agents, preflight, pulses and review by itself; off, it only records the
    commands it is sent (a deployment whose workflows are driven elsewhere, tests of the record alone)."""
    preflight_timeout: float = 1800.0
    """Seconds preflight may take (installing dependencies included); past that the workflow is abandoned."""
    pulse_max_turns: int = 8
    """Turns a pulse run may take (kickoff, rejections, extensions) before it is force-failed (iteration limit)."""
    pulse_escape_hatch_after: int = 2
    """Completion rejections before the agent is told about ``unresolvedIssues`` (progressive rejection)."""
    stage_nudges: int = 2
    """Times an agent that ends its turn without its stage's block tool is reminded before the workflow halts."""
    review_fix_rounds: int = 3
    """Times a workflow's review may send the work back to execution to fix its comments (``fix`` of a change
    request at review); past that a person decides (approve, ask the review again, or start a new workflow)."""
    loop_iteration_timeout: float = 300.0
    """Seconds one Pulse-Protocol loop iteration (an agent turn and its commit) may take."""
    loop_no_progress_limit: int = 3
    """Iterations in a row with no commit, or with the same error, before a loop session is ``BLOCKED``."""
    loop_memory_timeout: float = 2.0
    """Seconds a loop iteration waits for one answer of the turn memory (the indexer) before it goes on without it;
    until its first iteration starts a session is ``pending``."""
    handoff_threshold: float = 0.65
    """Share of its context window past which a swarm worker stops after its current step and hands off to a
    fresh session (seed 002's 65 %)."""
    snapshot_every: int = 100
    """Events between two snapshots of one aggregate (a workflow, loop session, epic or mailbox; a long-lived one is
    snapshotted every eighth of its events): a rebuild reads its last snapshot and the events after it rather than
    its whole history (``runtime/snapshots.py``); 0 takes none and reads none."""
    swarm_workers: int = 0
    """Pulse workers a swarm runs at once; 0 picks the smaller of the plan's widest set of independent beads
    and twice the machine's cores (at most 8). Preflight's ``single-worker`` advice makes it 1."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 0 < self.handoff_threshold <= 1:
            raise SettingsError(f"handoff_threshold must be in (0, 1], got {self.handoff_threshold}")
        if self.swarm_workers < 0:
            raise SettingsError(f"swarm_workers must be 0 (automatic) or more, got {self.swarm_workers}")
        if self.loop_iteration_timeout <= 0:
            raise SettingsError(f"loop_iteration_timeout must be positive, got {self.loop_iteration_timeout}")
        if self.loop_no_progress_limit < 1:
            raise SettingsError(f"loop_no_progress_limit must be 1 or more, got {self.loop_no_progress_limit}")
        if self.loop_memory_timeout <= 0:
            raise SettingsError(f"loop_memory_timeout must be positive, got {self.loop_memory_timeout}")
        if self.snapshot_every < 0:
            raise SettingsError(f"snapshot_every must be 0 (no snapshots) or more, got {self.snapshot_every}")
        if self.review_fix_rounds < 0:
            raise SettingsError(f"review_fix_rounds must be 0 (no fix rounds) or more, got {self.review_fix_rounds}")


class AgentRunnerSettings(CommonSettings, kw_only=True):
    """The agent runner's settings: the model, its budgets and the runner's store."""

    anthropic_api_key: str | None = None
    """Key for the model API (``AUTARCH_ANTHROPIC_API_KEY``, else ``ANTHROPIC_API_KEY``); unset sends a placeholder
    (enough for the scripted model)."""
    anthropic_base_url: str | None = None
    """Any Anthropic-compatible endpoint (a proxy, the scripted model); ``AUTARCH_ANTHROPIC_BASE_URL``, else
    ``ANTHROPIC_BASE_URL``; unset means the SDK's default."""
    model_max_retries: int = 4
    """Retries, with backoff, of a model request answered 429, 529 or 5xx (or not answered)."""
    agent_models: str = ""
    """Model per agent role as ``role=model,role=model`` (``*=model`` for every role); unset roles keep defaults."""
    agent_thinking: bool = True
    """Extended thinking for the roles whose agent asks for it; off sends no ``thinking`` parameter."""
    agent_max_steps: int = 200
    """Model calls one turn may make before it is ended with an error (a runaway loop guard)."""
    tool_output_limit: int = 100_000
    """Bytes of one tool result given to the model; longer output is cut with a marker saying so."""
    workflow_token_budget: int | None = None
    """Tokens (input, output, cache read and write) all sessions of one workflow may use; unset: no limit."""
    workflow_cost_budget: float | None = None
    """US dollars all sessions of one workflow may spend on the model; unset: no limit."""
    context_window_tokens: int | None = None
    """Context window of the models; unset uses each model's own (from the price table)."""
    compaction_threshold: float = 0.8
    """Fraction of the context window above which older turns are replaced by a digest in requests."""


REGISTRY_HOSTS = (
    "pypi.org", "files.pythonhosted.org",  # PyPI: the index, the files
    "registry.npmjs.org",
    "crates.io", "static.crates.io", "index.crates.io",
    "proxy.golang.org", "sum.golang.org",
    "deb.debian.org", "security.debian.org",
)
"""The package registries a preflight command reaches by default (``sandbox_registry_hosts``)."""
_HOST_NAME = re.compile(r"(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?")


def _registry_host_ok(entry: str) -> bool:
    host, port = entry, ""
    if entry.startswith("["):  # [IPv6]:port
        host, _, port = entry[1:].partition("]")
        port = port.removeprefix(":")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return False
    else:
        host, _, port = entry.partition(":")
        if not _HOST_NAME.fullmatch(host):
            return False
    return not port or (port.isdigit() and 0 < int(port) < 65536)


def _resolve_pair_ok(pair: str) -> bool:
    name, sep, address = pair.partition("=")
    try:
        ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return bool(sep) and _HOST_NAME.fullmatch(name.strip()) is not None and not name.startswith("*")


class ToolsSettings(CommonSettings, kw_only=True):
    """The tools service's settings: forwarding, web search, grep, shell output and the sandbox."""

    restart_grace: float = 15.0
    """Seconds an agent tool that forwards to the orchestrator or the git service keeps asking while neither
    answers (a restart) before the tool call fails."""
    anthropic_api_key: str | None = None
    """Read here only to redact the model key from tool output (the same setting as the agent runner's)."""
    exa_api_key: str | None = None
    """Key of the Exa API for the ``web_code_search`` tool (``AUTARCH_EXA_API_KEY``); unset: the tool says so."""
    exa_base_url: str = "https://api.exa.ai"
    """Base URL of the Exa API (``POST <base>/context``)."""
    tools_grep_workers: int | None = None
    """Worker processes the tools service's grep spreads big trees over; unset: one per CPU, 0: in-process."""
    tools_shell_output_chars: int = 512
    """Characters of a shell command's stdout (and of its stderr) shown to the model; seed 004's threshold."""
    sandbox: str = "on"
    """``on``: every agent command runs confined by the kernel (Landlock, namespaces), and is refused where no
    sandbox is available; ``off``: unconfined, the user's explicit choice (warned about at every start)."""
    sandbox_network: bool = False
    """Let agent commands open outgoing TCP connections to ``sandbox_network_ports`` (off: loopback only)."""
    sandbox_network_ports: tuple[int, ...] = (53, 80, 443)
    """Ports agent commands may connect to when ``sandbox_network`` is on (env: comma-separated)."""
    sandbox_read_paths: tuple[str, ...] = ()
    """More directories agent commands may read and execute from, e.g. ``~/.cargo`` (env: comma-separated)."""
    sandbox_write_paths: tuple[str, ...] = ()
    """More directories agent commands may write in, e.g. a shared build cache (env: comma-separated)."""
    sandbox_env: tuple[str, ...] = ()
    """More environment variable names agent commands inherit (env: comma-separated)."""
    sandbox_registry_hosts: tuple[str, ...] = REGISTRY_HOSTS
    """Hosts preflight commands reach through the sandbox's registry proxy while ``sandbox_network`` is off:
    ``name`` (ports 80 and 443), ``name:port``, ``*.name`` (its subdomains); the pip and npm mirrors configured
    on this machine are added to them. Every other host is refused (env: comma-separated)."""
    sandbox_registry_resolve: tuple[str, ...] = ()
    """``name=address`` pairs the registry proxy uses instead of DNS, like ``curl --resolve`` (a mirror on an
    internal address, say); only such a name, or ``localhost``, may lead to a loopback address (env:
    comma-separated)."""
    sandbox_memory_mib: int = 8192
    """Memory one agent command may use, all its processes together (MiB; 0: no limit)."""
    sandbox_processes: int = 4096
    """Processes and threads one agent command may have at once (0: no limit)."""
    sandbox_file_size_mib: int = 4096
    """Size of any one file an agent command writes (MiB; 0: no limit)."""
    sandbox_write_mib: int = 8192
    """Bytes one agent command may write to files in total (MiB; 0: no limit)."""
    sandbox_cpu_seconds: int = 1800
    """CPU time one agent command may use, all its processes together (seconds; 0: no limit)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.restart_grace < 0:
            raise SettingsError(f"restart_grace must be 0 or more, got {self.restart_grace}")
        if self.sandbox not in ("on", "off"):
            raise SettingsError(f'sandbox must be "on" or "off", got {self.sandbox!r}')
        bad_ports = [port for port in self.sandbox_network_ports if not 0 < port < 65536]
        if bad_ports:
            raise SettingsError(f"sandbox_network_ports must be between 1 and 65535, got {bad_ports}")
        bad_hosts = [host for host in self.sandbox_registry_hosts if not _registry_host_ok(host)]
        if bad_hosts:
            raise SettingsError(f"sandbox_registry_hosts takes names like pypi.org, mirror.example:8080 or "
                                f"*.example.org (no scheme, no path), got {bad_hosts}")
        bad_pairs = [pair for pair in self.sandbox_registry_resolve if not _resolve_pair_ok(pair)]
        if bad_pairs:
            raise SettingsError(f"sandbox_registry_resolve takes name=address pairs like "
                                f"mirror.internal=10.0.0.5, got {bad_pairs}")
        for name in ("sandbox_memory_mib", "sandbox_processes", "sandbox_file_size_mib", "sandbox_write_mib",
                     "sandbox_cpu_seconds"):
            if getattr(self, name) < 0:
                raise SettingsError(f"{name} must be 0 (no limit) or more, got {getattr(self, name)}")


class GitSettings(CommonSettings, kw_only=True):
    """The git service's settings: who its commits are by."""

    git_author_name: str = "Autarch"
    """Author of the commits the git service makes."""
    git_author_email: str = "autarch@localhost"
    """Author e-mail of the commits the git service makes."""
    git_committer_name: str | None = None
    """Committer of those commits; unset means the author."""
    git_committer_email: str | None = None
    """Committer e-mail of those commits; unset means the author's."""
    git_max_file_bytes: int = 100 * 1024 * 1024
    """The largest worktree file a checkpoint or bead commit reads; a larger one fails it with ``file_too_large``
    (nothing committed) rather than holding gigabytes in memory."""
    git_watch_worktrees: bool = True
    """Watch worktrees with inotify so that a pulse following an undisturbed checkpoint starts without a scan of
    every tracked file, and a checkpoint looks only at the files something happened to (Linux, local
    filesystems); off, every clean check and checkpoint scans every file."""


class IndexerSettings(CommonSettings, kw_only=True):
    """The indexer's settings: the embedding model and where the index lives."""

    embedding_backend: str = "minilm"
    """Indexer's dense model: ``minilm`` (local ONNX), ``onnx`` (a model the user exported), ``static`` (local
    Model2Vec) or ``hosted`` (an API)."""
    embedding_url: str | None = None
    """Base URL of an OpenAI-compatible embeddings API for ``hosted``."""
    embedding_model: str | None = None
    """Model name sent to the hosted API; the exported model's directory for ``onnx``; a Model2Vec model's for
    ``static``."""
    embedding_api_key: str | None = None
    """Bearer key of the hosted embeddings API (``AUTARCH_EMBEDDING_API_KEY``); unset sends none."""
    weaviate_url: str | None = None
    """``http://host:8080``: keep the semantic index in Weaviate instead of the embedded store."""
    weaviate_api_key: str | None = None
    """API key of that Weaviate (``AUTARCH_WEAVIATE_API_KEY``); unset sends none."""
    index_max_file_bytes: int = 1_000_000
    """Files larger than this are not indexed."""


_APPROVAL_TARGET = re.compile(r"telegram:-?[0-9]{1,20}|(slack|discord|webhook):https?://\S+")


class NotifierSettings(CommonSettings, kw_only=True):
    """The notifier's settings: where loop-session notifications go and how delivery is retried."""

    notify_webhooks: tuple[str, ...] = ()
    """Generic JSON webhook URLs every loop session notifies by default (env: comma-separated)."""
    notify_telegram_base_url: str = "https://api.telegram.org"
    """Base URL of the Telegram Bot API."""
    notify_telegram_token: str | None = None
    """Telegram bot token (a secret: never logged, shown as ``***`` by ``autarch config``); unset: no Telegram."""
    notify_max_attempts: int = 8
    """Delivery attempts of one notification before it is given up."""
    notify_backoff_initial: float = 0.5
    """Seconds before the first retry of a failed delivery; doubled after each failure."""
    notify_backoff_max: float = 30.0
    """Longest wait, in seconds, between two delivery attempts."""
    notify_timeout: float = 10.0
    """Seconds one delivery request may take."""
    # Discord threads, SMS and Telegram commands (issue 35).
    notify_discord_base_url: str = "https://discord.com/api/v10"
    """Base URL of the Discord API (``POST <base>/channels/<thread id>/messages``)."""
    notify_discord_bot_token: str | None = None
    """Discord bot token for ``discordThreadId`` targets (a secret); unset: such a target fails at once."""
    notify_sms_base_url: str = "https://api.twilio.com"
    """Base URL of a Twilio-compatible SMS API (``POST <base>/2010-04-01/Accounts/<sid>/Messages.json``)."""
    notify_sms_account_sid: str | None = None
    """Account SID of the SMS API (the basic-auth user); unset: an ``sms`` target fails at once."""
    notify_sms_auth_token: str | None = None
    """Auth token of the SMS API (the basic-auth password; a secret)."""
    notify_sms_from: str | None = None
    """The number text messages are sent from (E.164, ``+15550001111``)."""
    notify_telegram_allowed_chats: tuple[str, ...] = ()
    """Telegram chat ids whose ``/pulse`` commands start loop sessions (env: comma-separated). With one or more
    and a bot token the notifier reads the bot's messages (``getUpdates``); empty: it reads none."""
    notify_telegram_projects: tuple[str, ...] = ()
    """Repositories a Telegram command may start a session on, as absolute paths; a command names one by its
    directory name (env: comma-separated)."""
    notify_telegram_poll_timeout: int = 30
    """Seconds one ``getUpdates`` long poll waits for a message before asking again."""
    notify_approvals: tuple[str, ...] = ()
    """Where each card awaiting approval is announced with its action links (env: comma-separated):
    ``telegram:<chat id>`` (an inline keyboard; that chat's buttons are answered), ``slack:<webhook url>``,
    ``discord:<webhook url>`` (link buttons), ``webhook:<url>`` (JSON with the links)."""
    notify_links_base_url: str | None = None
    """The gateway's address as a phone reaches it (``https://autarch.example.com``): the action links start with
    it. Unset: only Telegram's buttons act (answered through the Bot API); other channels get the text alone."""
    notify_link_ttl: int = 86400
    """Seconds an action link stays valid (at most 30 days)."""
    notify_blocked_links: bool = False
    """Give each ``loop:blocked`` notification a Stop link (Telegram: a button answered through the Bot API; Slack,
    Discord, webhooks: with ``notify_links_base_url``) that aborts the session while it is still blocked there."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.notify_max_attempts < 1:
            raise SettingsError(f"notify_max_attempts must be 1 or more, got {self.notify_max_attempts}")
        if self.notify_timeout <= 0:
            raise SettingsError(f"notify_timeout must be positive, got {self.notify_timeout}")
        if not 1 <= self.notify_telegram_poll_timeout <= 60:
            raise SettingsError("notify_telegram_poll_timeout must be between 1 and 60 seconds, "
                                f"got {self.notify_telegram_poll_timeout}")
        bad_chats = [chat for chat in self.notify_telegram_allowed_chats if not re.fullmatch(r"-?[0-9]{1,20}", chat)]
        if bad_chats:
            raise SettingsError(f"notify_telegram_allowed_chats must be numeric chat ids, got {bad_chats}")
        bad_targets = [t for t in self.notify_approvals if not _APPROVAL_TARGET.fullmatch(t)]
        if bad_targets:
            raise SettingsError("notify_approvals takes telegram:<chat id>, slack:<url>, discord:<url> or "
                                f"webhook:<url> (http or https), got {bad_targets}")
        if self.notify_links_base_url is not None and not re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?",
                                                                      self.notify_links_base_url):
            raise SettingsError(f"notify_links_base_url must be an http(s) URL, got {self.notify_links_base_url!r}")
        if not 60 <= self.notify_link_ttl <= 30 * 24 * 3600:  # runtime.action_links.MAX_TTL
            raise SettingsError(f"notify_link_ttl must be between 60 seconds and 30 days, got {self.notify_link_ttl}")
        names: dict[str, str] = {}
        for path in self.notify_telegram_projects:
            name = Path(path).name
            if not path.startswith("/") or not name:
                raise SettingsError(f"notify_telegram_projects must be absolute paths of directories, got {path!r}")
            if name in names:
                raise SettingsError(f"notify_telegram_projects names {name!r} twice ({names[name]}, {path})")
            names[name] = path


SERVICE_SETTINGS: dict[str, type[CommonSettings]] = {
    "orchestrator": OrchestratorSettings,
    "agent_runner": AgentRunnerSettings,
    "tools": ToolsSettings,
    "git": GitSettings,
    "indexer": IndexerSettings,
    "gateway": GatewaySettings,
    "notifier": NotifierSettings,
}
"""Each service's settings type, by the name the service runs under."""

SECRET_SETTINGS = frozenset({
    "postgres_url", "anthropic_api_key", "exa_api_key", "embedding_api_key", "weaviate_api_key",
    "notify_telegram_token",
    "notify_discord_bot_token", "notify_sms_auth_token",
})
"""Settings never printed or logged (``autarch config`` shows ``***``)."""

S = TypeVar("S", bound=CommonSettings)


def narrow(settings: CommonSettings, cls: type[S]) -> S:
    """``settings`` as ``cls``: the fields ``cls`` has, nothing else (the aggregate or a service's own view)."""
    if type(settings) is cls:
        return settings
    return cls(**{f.name: getattr(settings, f.name) for f in msgspec.structs.fields(cls)})


def _aggregate_fields() -> list[tuple[str, Any, Any]]:
    common = {f.name for f in msgspec.structs.fields(CommonSettings)}
    seen: dict[str, msgspec.structs.FieldInfo] = {}
    fields: list[tuple[str, Any, Any]] = []
    for cls in SERVICE_SETTINGS.values():
        for f in msgspec.structs.fields(cls):
            if f.name in common:
                continue
            if f.name in seen:  # read by two services: one setting, declared alike in both
                assert (seen[f.name].type, seen[f.name].default) == (f.type, f.default), f.name
                continue
            seen[f.name] = f
            default = msgspec.field(default_factory=f.default_factory) if f.default is msgspec.NODEFAULT else f.default
            fields.append((f.name, f.type, default))
    return fields


def _validate_every_view(self: CommonSettings) -> None:
    for cls in SERVICE_SETTINGS.values():
        narrow(self, cls)


def _for_service(self: CommonSettings, name: str) -> CommonSettings:
    """The settings of service ``name`` (a key of :data:`SERVICE_SETTINGS`)."""
    return narrow(self, SERVICE_SETTINGS[name])


def _to_env(self: CommonSettings) -> dict[str, str]:
    """The environment that hands these settings to a child process."""
    env = {}
    for name, value in msgspec.structs.asdict(self).items():
        if isinstance(value, tuple):
            env[f"AUTARCH_{name.upper()}"] = ",".join(str(item) for item in value)
        elif value is not None:
            env[f"AUTARCH_{name.upper()}"] = str(value)
    return env


if TYPE_CHECKING:

    class Settings(
        OrchestratorSettings, AgentRunnerSettings, ToolsSettings, GitSettings, IndexerSettings, GatewaySettings,
        NotifierSettings,
    ):
        """Every setting of every service (what the CLI and the supervisor load)."""

        def for_service(self, name: str) -> CommonSettings: ...
        def to_env(self) -> dict[str, str]: ...

else:
    # The union of the service types, built from them so that each field is declared once, beside the service
    # that reads it. (A class inheriting them all is what type checkers see; at run time Structs cannot.)
    Settings = msgspec.defstruct(
        "Settings",
        _aggregate_fields(),
        bases=(CommonSettings,),
        kw_only=True,
        module=__name__,
        namespace={
            "__doc__": "Every setting of every service (what the CLI and the supervisor load).",
            "__post_init__": _validate_every_view,
            "for_service": _for_service,
            "to_env": _to_env,
        },
    )


_FIELDS = {f.name: f for f in msgspec.structs.fields(Settings)}
_LIST_FIELDS = {f.name for f in _FIELDS.values() if isinstance(f.default, tuple)}


def load_settings(overrides: dict[str, Any] | None = None, *, environ: dict[str, str] | None = None) -> Settings:
    """Build the settings from the TOML file, ``AUTARCH_*`` variables and ``overrides``."""
    environ = dict(os.environ if environ is None else environ)
    env_values: dict[str, Any] = {
        name: environ[f"AUTARCH_{name.upper()}"] for name in _FIELDS if f"AUTARCH_{name.upper()}" in environ
    }
    for name in _LIST_FIELDS & set(env_values):  # a list in a variable: comma-separated
        env_values[name] = [item.strip() for item in env_values[name].split(",") if item.strip()]
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    data_dir = given.get("data_dir") or env_values.get("data_dir") or _default_data_dir(environ)
    raw: dict[str, Any] = {"data_dir": data_dir}
    # The SDK's own variables work too (lowest precedence), so an exported ANTHROPIC_API_KEY just works.
    for name, variable in (("anthropic_api_key", "ANTHROPIC_API_KEY"), ("anthropic_base_url", "ANTHROPIC_BASE_URL")):
        if environ.get(variable):
            raw[name] = environ[variable]
    config_path = Path(environ.get("AUTARCH_CONFIG") or Path(data_dir).expanduser() / "config.toml")
    if config_path.is_file():
        try:
            raw.update(tomllib.loads(config_path.read_text()))
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError(f"{config_path}: {exc}") from exc
        unknown = sorted(set(raw) - set(_FIELDS))
        if unknown:
            raise SettingsError(f"{config_path}: unknown settings {', '.join(unknown)}")
    raw.update(env_values)
    raw.update(given)
    try:
        # Environment values are strings; msgspec converts "8765" to int under strict=False.
        return msgspec.convert(raw, Settings, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid setting: {exc}") from exc
