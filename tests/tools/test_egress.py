"""Preflight reaches the package registries through the sandbox's proxy; nothing else, and pulses not at all.

Every test runs real ``shell`` calls through the real executor against local HTTP servers the test starts.
``registry.test`` and ``elsewhere.test`` both lead to one of them through ``sandbox_registry_resolve`` (the proxy
resolves names itself), while only ``registry.test`` is in ``sandbox_registry_hosts``: what differs is the name,
as it would for a real registry and a host that is not one.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import io
import shlex
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from autarch.runtime.settings import Settings
from autarch.services.tools import sandbox
from autarch.services.tools.egress import PROXY_PORT
from autarch.services.tools.service import build_executor

from .helpers import Tools, make_repo

pytestmark = pytest.mark.skipif(
    sandbox.capabilities().landlock_abi < 1 or not sandbox.capabilities().namespaces,
    reason="the registry proxy needs Landlock and user namespaces (a network namespace per command)",
)


class Registry:
    """A local HTTP server standing in for a package registry; it records every request it gets."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[tuple[str, str]] = []
        registry = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args: object, **kwargs: object) -> None:
                super().__init__(*args, directory=str(root), **kwargs)  # type: ignore[arg-type]  # the handler's own arguments, passed on

            def send_head(self) -> io.BytesIO | BinaryIO | None:
                registry.requests.append((self.headers.get("Host", ""), self.path))
                return super().send_head()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _wheel(name: str, version: str, module: str) -> tuple[str, bytes]:
    """A pure-Python wheel holding ``<name>/__init__.py`` with ``module`` as its text."""
    files = {
        f"{name}/__init__.py": module.encode(),
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{name}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                             b"Tag: py3-none-any\n",
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{name}-{version}.dist-info/RECORD,,")
    files[f"{name}-{version}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    root = tmp_path / "registry"
    (root / "files").mkdir(parents=True)
    (root / "hello.txt").write_text("served by the registry\n")
    wheel_name, data = _wheel("tinypkg", "1.0", "VALUE = 'installed through the proxy'\n")
    (root / "files" / wheel_name).write_bytes(data)
    digest = hashlib.sha256(data).hexdigest()
    (root / "simple" / "tinypkg").mkdir(parents=True)
    (root / "simple" / "tinypkg" / "index.html").write_text(
        f'<!DOCTYPE html><html><body><a href="../../files/{wheel_name}#sha256={digest}">{wheel_name}</a>'
        "</body></html>\n"
    )
    server = Registry(root)
    yield server
    server.close()


@pytest.fixture
def tools(tmp_path: Path, registry: Registry) -> Iterator[Tools]:
    worktree = make_repo(tmp_path / "project", {"README.md": "project\n"})
    settings = Settings(
        data_dir=str(tmp_path / "data"), request_timeout=5.0, restart_grace=0.5,
        sandbox_registry_hosts=(f"registry.test:{registry.port}",),
        sandbox_registry_resolve=("registry.test=127.0.0.1", "elsewhere.test=127.0.0.1"),
    )
    executor = build_executor(settings, grep_workers=0)
    yield Tools(executor, worktree)
    executor.close()


def fetch(host: str, port: int, *, tunnel: bool, path: str = "/hello.txt", proxy: str = "os.environ['HTTP_PROXY']",
          ) -> str:
    """A command fetching ``http://host:port/path`` through the proxy the environment names (or ``proxy``).

    ``tunnel``: through ``CONNECT`` (as every https client does), otherwise as a plain absolute-URI ``GET``.
    """
    script = (
        "import http.client, os, urllib.parse\n"
        f"proxy = urllib.parse.urlsplit({proxy})\n"
        "conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=10)\n"
        + (f"conn.set_tunnel({host!r}, {port})\nconn.request('GET', {path!r})\n" if tunnel
           else f"conn.request('GET', 'http://{host}:{port}{path}')\n")
        + "print(conn.getresponse().read().decode(), end='')\n"
    )
    return f"python3 -c {shlex.quote(script)}"


async def test_preflight_fetches_from_an_allowed_registry_by_connect_and_plain_http(tools: Tools, registry: Registry):
    for tunnel in (True, False):
        value = await tools("shell", {"command": fetch("registry.test", registry.port, tunnel=tunnel)},
                            role="preflight")
        assert value == {"success": True, "exit_code": 0, "stdout": "served by the registry\n", "stderr": ""}, value
    assert registry.requests == [(f"registry.test:{registry.port}", "/hello.txt")] * 2


async def test_a_host_not_allowed_is_refused_and_the_result_names_the_setting(tools: Tools, registry: Registry,
                                                                               caplog: pytest.LogCaptureFixture):
    tunnel = await tools("shell", {"command": fetch("elsewhere.test", registry.port, tunnel=True)}, role="preflight")
    plain = await tools("shell", {"command": fetch("elsewhere.test", registry.port, tunnel=False)}, role="preflight")
    assert tunnel["exit_code"] != 0 and "403 Forbidden" in tunnel["stderr"], tunnel
    assert tunnel["sandbox"].startswith(f"the sandbox refused network access to elsewhere.test:{registry.port} (")
    assert "sandbox_registry_hosts" in tunnel["sandbox"] and "sandbox_network = true" in tunnel["sandbox"]
    # The plain request is answered 403 with the reason as its body, which the command prints.
    assert f"the sandbox refused elsewhere.test:{registry.port}" in plain["stdout"], plain
    assert plain["sandbox"] == tunnel["sandbox"]
    assert registry.requests == []  # nothing reached the server under the refused name
    assert any("refused elsewhere.test" in r.getMessage() for r in caplog.records)


async def test_pip_installs_from_a_local_index_through_the_proxy(tools: Tools, registry: Registry):
    index = f"http://registry.test:{registry.port}/simple/"
    value = await tools("shell", {"command": (
        "python3 -m pip install --isolated --disable-pip-version-check --no-cache-dir -q "
        f"--index-url {index} --trusted-host registry.test --target $TMPDIR/site tinypkg && "
        "PYTHONPATH=$TMPDIR/site python3 -c 'import tinypkg; print(tinypkg.VALUE)'"
    ), "timeoutSeconds": 120}, role="preflight")
    assert value["exit_code"] == 0 and value["stdout"] == "installed through the proxy\n", value
    assert "sandbox" not in value
    assert [path for _, path in registry.requests] == ["/simple/tinypkg/", "/files/tinypkg-1.0-py3-none-any.whl"]


async def test_a_pulse_has_no_network_and_cannot_reach_a_preflight_calls_proxy(tools: Tools, registry: Registry):
    # A preflight call holds its gate open while a pulse, told the socket's path (the preflight finds it among its
    # mounts), tries to reach it.
    preflight = asyncio.create_task(tools("shell", {"command": (
        "echo $(grep -o '/tmp/autarch-egress-[^ ]*' /proc/self/mountinfo | head -1)/proxy.sock > socket.txt; "
        "for i in $(seq 100); do [ -e go ] && break; sleep 0.05; done; "
        + fetch("registry.test", registry.port, tunnel=True)
    )}, role="preflight"))
    socket_path = tools.root / "socket.txt"
    while not (socket_path.exists() and socket_path.read_text()) and not preflight.done():
        await asyncio.sleep(0.02)
    assert socket_path.exists(), await preflight
    proxy_socket = socket_path.read_text().strip()
    try:
        pulse = await tools("shell", {"command": (
            "env | grep -ci proxy; python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); "
            f"s.connect(sys.argv[1]); print(\"reached\")' {proxy_socket}; "
            + fetch("registry.test", registry.port, tunnel=True, proxy=f"'http://127.0.0.1:{PROXY_PORT}'")
        )})
    finally:
        (tools.root / "go").touch()
        done = await preflight
    assert Path(proxy_socket).name == "proxy.sock" and pulse["stdout"] == "0\n", pulse
    assert "No such file or directory" in pulse["stderr"] and "Connection refused" in pulse["stderr"], pulse
    assert done["stdout"] == "served by the registry\n", done
    assert len(registry.requests) == 1  # the preflight's, not the pulse's
    assert not Path(proxy_socket).parent.exists()  # the gate is gone with its call


async def test_a_pulse_that_tries_the_network_is_told_it_has_none(tools: Tools):
    value = await tools("shell", {"command": "python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\""})
    assert "Temporary failure in name resolution" in value["stderr"] or "not known" in value["stderr"], value
    assert value["sandbox"].startswith("this command ran without network access: the sandbox gives agent commands "
                                       "only their own loopback")
    assert "sandbox_network = true" in value["sandbox"]
    quiet = await tools("shell", {"command": "echo fine"})
    assert "sandbox" not in quiet
    # In preflight, a program that looks a name up itself instead of asking the proxy is told about the proxy.
    ignoring = await tools("shell", {"command": "python3 -c \"import socket; socket.getaddrinfo('pypi.org', 443)\""},
                           role="preflight")
    assert ignoring["sandbox"].startswith("this command found no network: in the sandbox a preflight command "
                                          "reaches the package registries only through the registry proxy"), ignoring


async def test_the_machines_pip_configuration_and_local_index_reach_preflight_only(
        tmp_path: Path, registry: Registry, monkeypatch: pytest.MonkeyPatch):
    # The user's pip.conf (in their home, which no command can read) names a file:// index outside every
    # directory the sandbox grants (<root>/simple, its files in <root>/files): preflight gets both, a pulse neither.
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    index = registry.root / "simple"
    (home / ".config" / "pip" / "pip.conf").write_text(f"[global]\nindex-url = file://{index}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("PIP_CONFIG_FILE", raising=False)
    worktree = make_repo(tmp_path / "project", {"README.md": "project\n"})
    executor = build_executor(Settings(data_dir=str(tmp_path / "data"), request_timeout=5.0, restart_grace=0.5,
                                       tools_shell_output_chars=20_000), grep_workers=0)
    tools = Tools(executor, worktree)
    command = (f"python3 -m pip config get global.index-url; ls {index}; "
               "python3 -m pip install --disable-pip-version-check --no-cache-dir -q --no-deps --retries 0 "
               "--target $TMPDIR/site tinypkg && "
               "PYTHONPATH=$TMPDIR/site python3 -c 'import tinypkg; print(tinypkg.VALUE)'")
    try:
        preflight = await tools("shell", {"command": command, "timeoutSeconds": 120}, role="preflight")
        pulse = await tools("shell", {"command": command, "timeoutSeconds": 120})
    finally:
        executor.close()
    assert preflight["stdout"] == f"file://{index}\ntinypkg\ninstalled through the proxy\n", preflight
    assert f"file://{index}" not in pulse["stdout"] and "tinypkg\n" not in pulse["stdout"], pulse
    assert f"ls: cannot access '{index}': No such file or directory" in pulse["stderr"], pulse


async def test_with_sandbox_network_on_preflight_connects_by_itself_to_the_configured_ports(
        tmp_path: Path, registry: Registry):
    worktree = make_repo(tmp_path / "project", {"README.md": "project\n"})
    executor = build_executor(Settings(data_dir=str(tmp_path / "data"), sandbox_network=True,
                                       sandbox_network_ports=(registry.port,)), grep_workers=0)
    direct = ("python3 -c \"import urllib.request, sys; "
              "print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode(), end='')\" "
              f"http://127.0.0.1:{registry.port}/hello.txt")
    try:
        value = await Tools(executor, worktree)("shell", {"command": f"env | grep -ci _proxy; {direct}"},
                                                role="preflight")
    finally:
        executor.close()
    # No proxy variables, and no gate: the command opens the connection itself, to the ports the setting names.
    assert value["stdout"] == "0\nserved by the registry\n", value
    assert registry.requests == [(f"127.0.0.1:{registry.port}", "/hello.txt")]
