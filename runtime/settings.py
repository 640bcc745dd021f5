"""One typed settings object for every process.

Sources, later ones winning: defaults, the TOML file (``AUTARCH_CONFIG`` or
``<data dir>/config.toml``), ``AUTARCH_*`` environment variables, command-line flags.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["Settings", "SettingsError", "load_settings"]


def _default_data_dir(environ: dict[str, str] | None = None) -> str:
    environ = os.environ if environ is None else environ  # type: ignore[assignment]
    home = environ.get("HOME") or str(Path.home())
    base = environ.get("XDG_DATA_HOME") or str(Path(home) / ".local" / "share")
    return str(Path(base) / "autarch")


class SettingsError(ValueError):
    """A setting has a value that cannot be used; the message names the setting."""


class Settings(msgspec.Struct, kw_only=True):
    """Configuration shared by the CLI, the supervisor and every service."""

    data_dir: str = msgspec.field(default_factory=_default_data_dir)
    """Where event stores, worktrees, the token and the embedded NATS server's storage live."""
    host: str = "127.0.0.1"
    """Interface the gateway listens on."""
    port: int = 8765
    """Port of the gateway (HTTP API and SSE)."""
    nats_url: str | None = None
    """An existing NATS server to use; unset means ``autarch up`` starts an embedded one."""
    nats_port: int = 4333
    """Port of the embedded NATS server (loopback only)."""
    postgres_url: str | None = None
    """``postgresql://user:pass@host:port/db``: event stores in PostgreSQL instead of SQLite."""
    request_timeout: float = 10.0
    """Seconds a service request may take before the caller gets a ``timeout`` error."""
    restart_grace: float = 15.0
    """Seconds an agent tool that forwards to the orchestrator or the git service keeps asking while neither
    answers (a restart) before the tool call fails."""
    log_level: str = "INFO"
    sse_keepalive: float = 15.0
    """Seconds between SSE keep-alive comments when no event flows."""
    stream_replicas: int = 1
    """Replicas of the ``AUTARCH_EVENTS`` stream (3 on a three-node JetStream cluster)."""
    duplicate_window: float = 3600.0
    """Seconds JetStream remembers ``Nats-Msg-Id`` values: a relay restarted within it never publishes twice."""
    embedding_backend: str = "minilm"
    """Indexer's dense model: ``minilm`` (local ONNX), ``static`` (local Model2Vec) or ``hosted`` (an API)."""
    embedding_url: str | None = None
    """Base URL of an OpenAI-compatible embeddings API for ``hosted`` (key in ``AUTARCH_EMBEDDING_API_KEY``)."""
    embedding_model: str | None = None
    """Model name sent to the hosted API, or the directory of a Model2Vec model for ``static``."""
    weaviate_url: str | None = None
    """``http://host:8080``: keep the semantic index in Weaviate instead of the embedded store."""
    index_max_file_bytes: int = 1_000_000
    """Files larger than this are not indexed."""
    git_author_name: str = "Autarch"
    """Author of the commits the git service makes."""
    git_author_email: str = "autarch@localhost"
    """Author e-mail of the commits the git service makes."""
    git_committer_name: str | None = None
    """Committer of those commits; unset means the author."""
    git_committer_email: str | None = None
    """Committer e-mail of those commits; unset means the author's."""
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
    agent_store_synchronous: str = "NORMAL"
    """SQLite ``synchronous`` of the runner's store: NORMAL survives a killed process; FULL also a power cut."""
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

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise SettingsError(f"port must be between 1 and 65535, got {self.port}")
        if not 0 < self.nats_port < 65536:
            raise SettingsError(f"nats_port must be between 1 and 65535, got {self.nats_port}")
        if self.request_timeout <= 0:
            raise SettingsError(f"request_timeout must be positive, got {self.request_timeout}")
        if self.restart_grace < 0:
            raise SettingsError(f"restart_grace must be 0 or more, got {self.restart_grace}")
        if self.sandbox not in ("on", "off"):
            raise SettingsError(f'sandbox must be "on" or "off", got {self.sandbox!r}')
        bad_ports = [port for port in self.sandbox_network_ports if not 0 < port < 65536]
        if bad_ports:
            raise SettingsError(f"sandbox_network_ports must be between 1 and 65535, got {bad_ports}")

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir).expanduser()

    @property
    def token_path(self) -> Path:
        return self.data_path / "token"

    @property
    def effective_nats_url(self) -> str:
        return self.nats_url or f"nats://127.0.0.1:{self.nats_port}"

    def to_env(self) -> dict[str, str]:
        """The environment that hands these settings to a child process."""
        env = {}
        for name, value in msgspec.structs.asdict(self).items():
            if isinstance(value, tuple):
                env[f"AUTARCH_{name.upper()}"] = ",".join(str(item) for item in value)
            elif value is not None:
                env[f"AUTARCH_{name.upper()}"] = str(value)
        return env


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
