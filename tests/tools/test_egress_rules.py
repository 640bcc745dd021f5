"""The registry proxy's rules without a sandbox: the allow-list, the address rule, and the machine's registries.

The proxy is spoken to over its real unix socket, as the forwarder inside a sandbox does; the upstream is a local
TCP server the test starts. These run on any machine (the sandbox's own tests are in ``test_egress.py``).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autarch.runtime.settings import Settings, SettingsError, load_settings
from autarch.services.tools.egress_allow import AllowList, parse_host
from autarch.services.tools.egress_proxy import EgressGate
from autarch.services.tools.registries import machine_registries
from autarch.services.tools.service import build_executor


def test_allow_list_entries_match_names_ports_and_subdomains():
    allow = AllowList.build(["pypi.org", "Mirror.Example:8443", "*.crates.example", "[::1]:3141", "10.0.0.5"])
    assert allow.permits("pypi.org", 443) and allow.permits("PYPI.ORG.", 80)
    assert not allow.permits("pypi.org", 22) and not allow.permits("evil-pypi.org", 443)
    assert not allow.permits("pypi.org.evil.example", 443)
    assert allow.permits("mirror.example", 8443) and not allow.permits("mirror.example", 443)
    assert allow.permits("static.crates.example", 443) and not allow.permits("crates.example", 443)
    assert allow.permits("::1", 3141) and allow.permits("10.0.0.5", 443)
    for bad in ("https://pypi.org", "pypi.org/simple", "pypi.org:0", "pypi.org:http", "", "a..b"):
        with pytest.raises(ValueError):
            parse_host(bad)


def test_registry_settings_are_checked_and_shown(tmp_path: Path):
    settings = Settings(data_dir=str(tmp_path))
    assert "pypi.org" in settings.sandbox_registry_hosts and "registry.npmjs.org" in settings.sandbox_registry_hosts
    loaded = load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path),
                                    "AUTARCH_SANDBOX_REGISTRY_HOSTS": "pypi.org, mirror.internal:3141",
                                    "AUTARCH_SANDBOX_REGISTRY_RESOLVE": "mirror.internal=10.1.2.3"})
    assert loaded.sandbox_registry_hosts == ("pypi.org", "mirror.internal:3141")
    assert loaded.sandbox_registry_resolve == ("mirror.internal=10.1.2.3",)
    with pytest.raises(SettingsError, match="sandbox_registry_hosts takes names"):
        load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_SANDBOX_REGISTRY_HOSTS": "https://x.org/"})
    with pytest.raises(SettingsError, match="sandbox_registry_resolve takes name=address"):
        load_settings(environ={"AUTARCH_DATA_DIR": str(tmp_path), "AUTARCH_SANDBOX_REGISTRY_RESOLVE": "x.org=nope"})


@pytest.fixture
async def upstream():
    """A TCP server on loopback answering every request with the request's head (a registry, or the gateway)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = b"upstream saw " + head
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


async def ask(gate: EgressGate, request: str) -> bytes:
    assert gate.socket_path is not None
    reader, writer = await asyncio.open_unix_connection(gate.socket_path)
    writer.write(request.encode())
    data = await reader.read(4096)
    if data.startswith(b"HTTP/1.1 200 Connection established"):
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        data = await reader.read(4096)
    writer.close()
    return data


async def test_an_allowed_name_that_resolves_to_this_machine_is_refused(upstream: int):
    async def resolver(host: str, port: int) -> list[str]:
        return {"pypi.example": ["127.0.0.1"], "metadata.example": ["169.254.169.254"]}[host]

    allow = AllowList.build([f"pypi.example:{upstream}", "metadata.example", f"mirror.local:{upstream}"],
                            ["mirror.local=127.0.0.1"])
    async with EgressGate(allow, label="test", resolver=resolver) as gate:
        rebound = await ask(gate, f"CONNECT pypi.example:{upstream} HTTP/1.1\r\n\r\n")
        metadata = await ask(gate, "GET http://metadata.example/latest/ HTTP/1.1\r\n\r\n")
        chosen = await ask(gate, f"CONNECT mirror.local:{upstream} HTTP/1.1\r\n\r\n")
        assert gate.reached == {f"mirror.local:{upstream}": 1}
    assert rebound.startswith(b"HTTP/1.1 403") and b"resolves to a local address (127.0.0.1)" in rebound
    assert metadata.startswith(b"HTTP/1.1 403") and b"169.254.169.254" in metadata
    assert b"upstream saw GET / HTTP/1.1" in chosen  # the user mapped this name to loopback themselves
    assert [(r.host, r.refused) for r in gate.refusals] == [("pypi.example", True), ("metadata.example", True)]


async def test_a_plain_http_request_goes_to_the_uris_host_whatever_its_host_header(upstream: int):
    allow = AllowList.build([f"mirror.local:{upstream}"], ["mirror.local=127.0.0.1"])
    async with EgressGate(allow, label="test") as gate:
        answer = await ask(gate, (f"GET http://mirror.local:{upstream}/simple/six/ HTTP/1.1\r\nHost: other.example\r\n"
                                  "Proxy-Authorization: x\r\nConnection: keep-alive\r\nAccept: text/html\r\n\r\n"))
    seen = answer.split(b"upstream saw ", 1)[1]
    assert seen.startswith(b"GET /simple/six/ HTTP/1.1\r\n"), answer
    headers = seen.lower()
    assert f"host: mirror.local:{upstream}".encode() in headers and b"other.example" not in headers
    assert b"proxy-authorization" not in headers and b"connection: close" in headers and b"accept: text/html" in headers


async def test_bad_requests_get_a_plain_answer_and_unreachable_hosts_are_recorded(upstream: int):
    async def resolver(host: str, port: int) -> list[str]:
        raise OSError(-2, "Name or service not known")

    allow = AllowList.build(["gone.example", "pypi.org"])
    async with EgressGate(allow, label="test", resolver=resolver) as gate:
        assert (await ask(gate, "hello\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await ask(gate, "POST http://pypi.org/legacy/ HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await ask(gate, "GET https://pypi.org/ HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert (await ask(gate, "GET / HTTP/1.1\r\nX: " + "y" * 70_000 + "\r\n\r\n")).startswith(b"HTTP/1.1 431")
        gone = await ask(gate, "CONNECT gone.example:443 HTTP/1.1\r\n\r\n")
        directory = Path(gate.directory or "")
    assert gone.startswith(b"HTTP/1.1 502") and b"could not resolve gone.example: Name or service not known" in gone
    assert [(r.host, r.refused) for r in gate.refusals] == [("gone.example", False)]
    assert not directory.exists()


def test_the_machines_pip_and_npm_registries_are_found(tmp_path: Path):
    home = tmp_path / "home"
    (home / ".config" / "pip").mkdir(parents=True)
    wheels, local_index, data = tmp_path / "wheels", tmp_path / "index" / "simple", tmp_path / "data"
    for directory in (wheels, local_index, data / "mirror"):
        directory.mkdir(parents=True)
    (home / ".config" / "pip" / "pip.conf").write_text(
        "[global]\nindex-url = https://user:s3cret-pw@pypi.mirror.example:8443/simple\n"
        f"extra-index-url =\n    file://{local_index}\n    http://plain.example/simple\n"
        f"find-links = {wheels}\n[install]\nfind-links = {data / 'mirror'}\n"
    )
    (home / ".npmrc").write_text("registry=https://npm.mirror.example/\n//npm.mirror.example/:_authToken=npm-tok\n")
    environ = {"HOME": str(home), "XDG_CONFIG_DIRS": str(tmp_path / "none"),
               "PIP_EXTRA_INDEX_URL": "https://extra.example/simple", "UNRELATED": "x"}
    found = machine_registries(environ, exclude=(str(data),))
    assert {"pypi.mirror.example:8443", "plain.example:80", "npm.mirror.example:443", "extra.example:443"} <= set(
        found.hosts)
    assert str(local_index.parent) in found.read_paths and str(wheels) in found.read_paths  # <root>/simple: <root>
    assert not any(path.startswith(str(data)) for path in found.read_paths)  # never the data dir
    assert {"s3cret-pw", "npm-tok"} <= set(found.secrets)
    assert dict(found.home_files)[".config/pip/pip.conf"].startswith(b"[global]")
    assert ".npmrc" in dict(found.home_files)
    assert found.env == (("PIP_EXTRA_INDEX_URL", "https://extra.example/simple"),)


def test_the_registries_widen_only_the_allow_list_and_their_secrets_are_redacted(tmp_path: Path, monkeypatch):
    home = tmp_path / "home"
    (home / ".pip").mkdir(parents=True)
    (home / ".pip" / "pip.conf").write_text("[global]\nindex-url = https://u:pw-4711@mirror.example/simple\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    executor = build_executor(Settings(data_dir=str(tmp_path / "data"), sandbox_registry_hosts=("pypi.org",)),
                              grep_workers=0)
    try:
        allow = executor.settings.egress.allow
        assert allow.permits("mirror.example", 443) and allow.permits("pypi.org", 443)
        assert not allow.permits("registry.npmjs.org", 443)  # the setting replaced the default list
        assert "pw-4711" not in executor.redactor.redact("echo $PASSWORD\npw-4711\n")
    finally:
        executor.close()
