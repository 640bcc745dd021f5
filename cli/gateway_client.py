"""The commands' HTTP client of the gateway: where it is, its token, typed errors.

The gateway's URL is ``--url``, else the ``gateway_url`` that ``autarch up`` wrote to
``<data dir>/run.json``, else ``http://<host>:<port>`` from the settings. The token is read from
``--token-file``, else ``<data dir>/token`` (created by ``autarch up`` on first start).
httpx is imported only when a command talks to the gateway, so the other commands work without it.
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autarch.runtime.settings import Settings, SettingsError, load_settings

__all__ = [
    "CliError",
    "Connection",
    "GatewayClient",
    "GatewayError",
    "GatewayUnreachable",
    "add_connection_arguments",
    "connection_from_args",
    "print_json",
]

NOT_RUNNING = "is `autarch up` running?"


class CliError(Exception):
    """A failure to report on stderr (``autarch: <message>``) with ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


class GatewayError(CliError):
    """The gateway answered with an error body ``{code, message, details}``."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.details = details or {}


class GatewayUnreachable(CliError):
    """Nothing answers at the gateway's address."""


@dataclass(frozen=True)
class Connection:
    url: str
    token: str
    sse_keepalive: float = 15.0
    """Seconds between the gateway's SSE keep-alive comments (its ``sse_keepalive`` setting, read from the
    same settings): a stream silent for clearly longer than this is a dead connection."""


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("gateway")
    group.add_argument("--url", help="the gateway (default: the one `autarch up` runs, from <data dir>/run.json)")
    group.add_argument("--token-file", metavar="PATH", help="file holding the bearer token (default <data dir>/token)")
    group.add_argument("--data-dir", help="data directory of `autarch up` (env AUTARCH_DATA_DIR)")


def _local(host: str) -> str:
    # A gateway listening on every interface is reached on loopback.
    return "127.0.0.1" if host in ("", "0.0.0.0", "::") else host


def _gateway_url(settings: Settings) -> str:
    run_file = settings.data_path / "run.json"
    try:
        url = json.loads(run_file.read_text()).get("gateway_url")
    except (OSError, ValueError, AttributeError):
        url = None
    if isinstance(url, str) and url:
        return url.replace("://0.0.0.0:", "://127.0.0.1:")
    host = _local(settings.host)
    return f"http://[{host}]:{settings.port}" if ":" in host else f"http://{host}:{settings.port}"


def connection_from_args(args: argparse.Namespace) -> Connection:
    """The gateway's URL and token for these command-line arguments."""
    try:
        settings = load_settings({"data_dir": getattr(args, "data_dir", None)})
    except SettingsError as exc:
        raise CliError(str(exc), exit_code=2) from None
    url = (getattr(args, "url", None) or _gateway_url(settings)).rstrip("/")
    token_file = Path(args.token_file).expanduser() if getattr(args, "token_file", None) else settings.token_path
    try:
        token = token_file.read_text().strip()
    except FileNotFoundError:
        raise CliError(f"no token at {token_file}: {NOT_RUNNING} (or pass --token-file)") from None
    except OSError as exc:
        raise CliError(f"cannot read the token at {token_file}: {exc.strerror or exc}") from None
    if not token:
        raise CliError(f"{token_file} is empty")
    return Connection(url=url, token=token, sse_keepalive=settings.sse_keepalive)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


_ID_PREFIX = re.compile(r"^[0-9a-fA-F][0-9a-fA-F-]{3,35}$")


class GatewayClient:
    """Synchronous JSON requests to the gateway; every failure is a :class:`CliError`.

    ``trust_env=False`` ignores the proxy (and other httpx settings) of the environment: for a gateway this
    process started on loopback, which a user's proxy must not see.
    """

    def __init__(self, connection: Connection, *, timeout: float = 30.0, transport: Any = None,
                 trust_env: bool = True) -> None:
        try:
            import httpx
        except ImportError:  # pragma: no cover - httpx comes with every extra that runs services
            raise CliError("this command needs httpx: pip install httpx") from None
        self._httpx = httpx
        self.connection = connection
        self._http = httpx.Client(
            base_url=connection.url,
            # No token: the public endpoints only (/healthz), e.g. before `autarch up` wrote one.
            headers={"Authorization": f"Bearer {connection.token}"} if connection.token else {},
            timeout=timeout, transport=transport, trust_env=trust_env,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _unreachable(self, exc: Exception) -> CliError:
        return GatewayUnreachable(f"cannot reach the gateway at {self.connection.url} ({exc}): {NOT_RUNNING}")

    def request(self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        httpx = self._httpx
        kwargs: dict[str, Any] = {"params": params}
        if body is not None:
            kwargs["json"] = body
        try:
            response = self._http.request(method, path, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._unreachable(exc) from None
        except httpx.TimeoutException:
            raise CliError(f"the gateway at {self.connection.url} did not answer in time") from None
        except httpx.HTTPError as exc:
            raise CliError(f"request to {self.connection.url} failed: {exc}") from None
        return self._decode(response)

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v is not None} or None)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)

    @staticmethod
    def _decode(response: Any) -> Any:
        try:
            payload = response.json()
        except ValueError:
            payload = None
        if response.status_code >= 400:
            if isinstance(payload, dict) and isinstance(payload.get("code"), str):
                raise GatewayError(response.status_code, payload["code"], str(payload.get("message", "")),
                                   payload.get("details") or {})
            raise GatewayError(response.status_code, f"http_{response.status_code}",
                               response.text[:500] or response.reason_phrase)
        if payload is None and response.content:
            raise CliError(f"the gateway answered {response.status_code} with a body that is not JSON")
        return payload

    @property
    def sse_read_timeout(self) -> float:
        """How long an SSE stream may stay silent before it counts as dead: the keep-alive interval plus slack
        (a busy gateway may send one late), so a gateway whose host vanished without closing the connection
        is noticed in under half a minute by default (15 s keep-alives → 24.5 s)."""
        return self.connection.sse_keepalive * 1.5 + 2.0

    @contextmanager
    def events(self, *, workflow: str | None, since: int | None, deltas: bool = True,
               read_timeout: float | None = None) -> Iterator[Any]:
        """``GET /api/events`` as a stream of text lines.

        ``deltas=False`` asks for recorded events only (no live text and thinking deltas). The gateway sends a
        keep-alive comment when nothing else flows; reading stops with ``httpx.ReadTimeout`` after
        ``read_timeout`` (default :attr:`sse_read_timeout`) seconds of silence, and with ``httpx``'s
        ``RemoteProtocolError`` when the gateway's process dies mid-stream: the caller reconnects.
        """
        httpx = self._httpx
        params: dict[str, Any] = {} if deltas else {"deltas": "false"}
        if workflow is not None:
            params["workflow"] = workflow
        if since is not None:
            params["since"] = since
        timeout = httpx.Timeout(10.0, read=self.sse_read_timeout if read_timeout is None else read_timeout)
        try:
            with self._http.stream("GET", "/api/events", params=params, timeout=timeout,
                                   headers={"Accept": "text/event-stream"}) as response:
                if response.status_code >= 400:
                    response.read()
                    self._decode(response)
                yield response.iter_lines()
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise self._unreachable(exc) from None

    def workflow_id(self, given: str) -> str:
        """``given`` as a full workflow id; a unique prefix (``99f31dc9``) of one is accepted too."""
        try:
            return str(uuid.UUID(given))
        except ValueError:
            pass
        if not _ID_PREFIX.match(given):
            raise CliError(f"{given!r} is not a workflow id")
        listed = self.get("/api/workflows", limit=10_000)
        matches = [w["id"] for w in listed["items"] if w["id"].startswith(given.lower())]
        if not matches:
            raise CliError(f"not_found: no workflow {given}")
        if len(matches) > 1:
            raise CliError(f"{given} is ambiguous: it starts {len(matches)} workflow ids ({', '.join(matches[:5])})")
        return matches[0]
