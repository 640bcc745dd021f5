"""A confined command's way to the package registries, and what its result says when the network was not there.

A preflight command (it installs dependencies) runs, like every agent command, in a network namespace with only
its own loopback. Unless the user opened the network (``sandbox_network = true``), it reaches the registries
through a proxy the tools service runs for that one call (:class:`~.egress_proxy.EgressGate`): the sandbox binds
the gate's socket directory in, the launcher starts the forwarder (:mod:`.egress_forward`) in the command's
namespaces on ``127.0.0.1:`` :data:`PROXY_PORT`, and the command's ``HTTP(S)_PROXY`` variables (and npm's) name
it. It also gets this machine's pip and npm registry configuration (:mod:`.registries`): their user-level files in its
private ``HOME``, their variables, read access to the local indexes and files they name. A pulse gets none of
it: no socket is bound into its sandbox, so it has no network at all.

Why a unix socket and a forwarder rather than a TCP port on the host: the namespace cannot reach the host's
loopback (that is its point), and a socket that exists only for the call's lifetime, in a directory only a
preflight sandbox has bound in, is reachable by nothing else the agent runs.

The result of a call whose command met the proxy's refusal, or failed to resolve a name without a network,
carries a ``sandbox`` sentence naming the setting that opens it (:meth:`CommandNetwork.note`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from . import landlock
from .egress_allow import AllowList
from .egress_proxy import EgressGate, Resolver
from .registries import RegistryConfig
from .sandbox import SandboxPolicy, capabilities

__all__ = ["PROXY_PORT", "CommandNetwork", "EgressPolicy", "command_network"]

PROXY_PORT = 43128
"""Where the forwarder listens inside a preflight command's namespace (private to it: no clash outside)."""
_NO_PROXY = "localhost,127.0.0.1,::1"
_NETWORK_FAILURE = re.compile(
    r"temporary failure in name resolution|name or service not known|could not resolve (host|proxy)"
    r"|no address associated with hostname|getaddrinfo (enotfound|eai_again)|network is unreachable"
    r"|failed to resolve|failed to lookup address|dial tcp: lookup|name resolution failed"
    r"|nodename nor servname",
    re.IGNORECASE,
)
"""What resolvers and clients say when there is no DNS or no route (glibc, curl, npm, pip/urllib3, Go, Rust)."""


@dataclass(frozen=True)
class EgressPolicy:
    """What preflight may reach: the allow-list (settings plus mirrors) and the machine's registry configuration."""

    allow: AllowList = field(default_factory=AllowList)
    registries: RegistryConfig = field(default_factory=RegistryConfig)
    resolver: Resolver | None = None
    """How the proxy resolves names (None: the system's resolver); tests give their own."""


class CommandNetwork:
    """One command's network side: what :func:`~.sandbox.prepare_launch` adds to its sandbox, and what it met."""

    def __init__(self, *, gate: EgressGate | None = None, registries: RegistryConfig | None = None,
                 preflight: bool = False) -> None:
        self.gate = gate
        self.registries = registries
        self.preflight = preflight
        self.private_network: bool | None = None
        """Whether the command ran in a network namespace of its own (None: a launch that did not say)."""
        self.proxied = False
        """Whether its sandbox got the registry proxy."""

    def apply(self, spec: dict, env: dict[str, str], temp_dir: str) -> None:
        """Add the registries (and the proxy, if any) to a launcher spec being built, its environment, its HOME."""
        self.private_network = bool(spec.get("private_network"))
        if self.registries is not None:
            for path in self.registries.read_paths:
                rights = landlock.READ if os.path.isdir(path) else landlock.ACCESS_FS["read_file"]
                spec["rules"].append((path, rights))
            for relative, data in self.registries.home_files:
                target = os.path.join(temp_dir, relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as handle:
                    handle.write(data)
            env.update(self.registries.env)
        if self.gate is not None and self.gate.directory and self.private_network:
            spec["rules"].append((self.gate.directory, landlock.READ))  # bound back under the hidden /tmp
            spec["egress"] = {"socket": self.gate.socket_path, "port": PROXY_PORT}
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            env.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy,
                       npm_config_proxy=proxy, npm_config_https_proxy=proxy, NO_PROXY=_NO_PROXY, no_proxy=_NO_PROXY)
            self.proxied = True

    def note(self, policy: SandboxPolicy, stdout: str, stderr: str) -> str | None:
        """The sentence the call's result carries about the network (None: nothing to say)."""
        sentences = []
        refused = [r for r in self.gate.refusals if r.refused] if self.gate else []
        failed = [r for r in self.gate.refusals if not r.refused] if self.gate else []
        if refused:
            hosts = ", ".join(f"{r.host}:{r.port}" for r in refused)
            local = [r.reason for r in refused if r.reason != "not in the allow-list"]
            sentences.append(
                f"the sandbox refused network access to {hosts} ({'; '.join(local) + '; ' if local else ''}"
                "preflight commands may reach only the package registries in sandbox_registry_hosts and the pip/npm "
                "mirrors configured on this machine; add the host to sandbox_registry_hosts, or set "
                "sandbox_network = true to let agent commands open outgoing TCP to sandbox_network_ports)"
            )
        if failed:
            sentences.append("the sandbox's registry proxy " + "; ".join(r.reason for r in failed))
        if not sentences and policy.mode == "on" and not policy.network and (
            _NETWORK_FAILURE.search(stderr) or _NETWORK_FAILURE.search(stdout)
        ):
            sentences.append(self._offline_sentence())
        return "; ".join(sentences) or None

    def _offline_sentence(self) -> str:
        opens = "set sandbox_network = true to let agent commands open outgoing TCP to sandbox_network_ports"
        if self.proxied:
            return ("this command found no network: in the sandbox a preflight command reaches the package "
                    "registries only through the registry proxy named in HTTPS_PROXY and HTTP_PROXY, which the "
                    f"failing program did not use ({opens})")
        if self.preflight:
            return ("this command ran without network access: this machine's sandbox cannot give preflight "
                    "commands the registry proxy (it needs Landlock and user namespaces), so they have no network "
                    f"({opens})")
        return ("this command ran without network access: the sandbox gives agent commands only their own "
                f"loopback, and only preflight commands reach the package registries, through a proxy ({opens})")


async def _proxy_possible(policy: SandboxPolicy) -> bool:
    """Whether a preflight command will run in a network namespace of its own (so the proxy is its way out)."""
    if policy.mode != "on" or policy.network:
        return False
    caps = await asyncio.to_thread(capabilities)  # probed once per process, by starting the launcher
    return caps.landlock_abi >= 1 and caps.namespaces


@contextlib.asynccontextmanager
async def command_network(egress: EgressPolicy, sandbox: SandboxPolicy, *, preflight: bool,
                          label: str) -> AsyncIterator[CommandNetwork]:
    """The network side of one command: a gate to the registries for a preflight command, nothing for a pulse.

    The gate (when there is one) is open for the body of the ``with`` and closed after it, its socket removed.
    """
    if not preflight or sandbox.mode != "on":
        yield CommandNetwork(preflight=preflight)
        return
    if not await _proxy_possible(sandbox):
        yield CommandNetwork(registries=egress.registries, preflight=True)
        return
    async with EgressGate(egress.allow, label=label, resolver=egress.resolver) as gate:
        yield CommandNetwork(gate=gate, registries=egress.registries, preflight=True)
