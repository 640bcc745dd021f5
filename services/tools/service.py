"""The tools service on NATS: ``call``, ``list_tools``, ``file_access`` and ``cancel`` (queue group ``tools``)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable

from nats.aio.client import Client

from autarch.contracts.tools import (
    CALL,
    CANCEL,
    FILE_ACCESS,
    LIST_TOOLS,
    CancelToolCall,
    GetFileAccess,
    ListTools,
    ToolCall,
)
from autarch.runtime.leases import LeaseTable
from autarch.runtime.micro import TypedService
from autarch.runtime.settings import ToolsSettings, narrow

from .cancelling import CancelRouter
from .context import Forwarder, ToolSettings
from .egress import EgressPolicy
from .egress_allow import AllowList
from .executor import ToolExecutor
from .grep_pool import GrepEngine
from .registries import machine_registries
from .sandbox import MIB, SYSTEM_SECRETS, SandboxLimits, SandboxPolicy, capabilities
from .sensitivity import Redactor, platform_secret_values
from .store import SessionStore

__all__ = ["build_executor", "start"]

log = logging.getLogger("tools")

_KEEP_SESSIONS_SECONDS = 14 * 24 * 3600


def sandbox_policy(settings: ToolsSettings) -> SandboxPolicy:
    """The sandbox settings as the shell tool reads them."""
    return SandboxPolicy(
        mode=settings.sandbox,
        network=settings.sandbox_network,
        network_ports=settings.sandbox_network_ports,
        read_paths=settings.sandbox_read_paths,
        write_paths=settings.sandbox_write_paths,
        env=settings.sandbox_env,
        data_dir=str(settings.data_path),
        limits=SandboxLimits(
            memory=settings.sandbox_memory_mib * MIB,
            processes=settings.sandbox_processes,
            file_size=settings.sandbox_file_size_mib * MIB,
            write=settings.sandbox_write_mib * MIB,
            cpu=settings.sandbox_cpu_seconds,
        ),
    )


def egress_policy(settings: ToolsSettings) -> EgressPolicy:
    """What preflight commands reach: ``sandbox_registry_hosts`` and the registries configured on this machine."""
    registries = machine_registries(exclude=(str(settings.data_path), *SYSTEM_SECRETS))
    allow = AllowList.build((*settings.sandbox_registry_hosts, *registries.hosts), settings.sandbox_registry_resolve)
    return EgressPolicy(allow=allow, registries=registries)


def sandbox_warning(settings: ToolsSettings) -> str | None:
    """What the user must hear at every start when agent commands will not run confined; None when they will."""
    if settings.sandbox == "off":
        return ("sandbox = \"off\": agent commands run UNCONFINED, with your user's access to every file, "
                "the network and this system's services (set sandbox = \"on\" to confine them)")
    caps = capabilities()
    if caps.landlock_abi < 1 and shutil.which("bwrap"):
        return ("no Landlock on this kernel: agent commands are confined by bubblewrap instead, whose "
                "sandbox_network opens the whole network, not only sandbox_network_ports, and preflight commands "
                "get no registry proxy (they install dependencies only with sandbox_network = true)")
    if caps.landlock_abi < 1:
        return ("no sandbox is available on this machine (no Landlock, no bubblewrap): shell commands of agents "
                "will be refused; install bubblewrap, or set sandbox = \"off\" to run them unconfined at your own "
                "risk")
    if not caps.namespaces:
        return (f"user namespaces are not available ({caps.namespace_error}): agent commands are confined by "
                "Landlock alone; a process they detach with setsid can outlive them, and preflight commands get no "
                "registry proxy (they install dependencies only with sandbox_network = true)")
    return None


def build_executor(
    settings: ToolsSettings, *, nc: Client | None = None, grep_workers: int | None = None,
    leases: LeaseTable | None = None,
) -> ToolExecutor:
    """An executor with its store under ``<data dir>/tools/`` (grep workers are not started yet)."""
    workers = grep_workers if grep_workers is not None else settings.tools_grep_workers
    if workers is None:
        cpus = os.cpu_count() or 1
        workers = cpus if cpus > 1 else 0
    store = SessionStore(settings.data_path / "tools" / "sessions.sqlite3")
    egress = egress_policy(settings)
    secrets = [*platform_secret_values(), *(v for v in (settings.exa_api_key, settings.anthropic_api_key) if v),
               *egress.registries.secrets]
    return ToolExecutor(
        store=store,
        engine=GrepEngine(workers=workers),
        forwarder=Forwarder(nc, timeout=settings.request_timeout, restart_grace=settings.restart_grace,
                            orchestrator_partitions=settings.orchestrator_partitions),
        settings=ToolSettings(
            exa_api_key=settings.exa_api_key,
            exa_base_url=settings.exa_base_url,
            shell_output_chars=settings.tools_shell_output_chars,
            sandbox=sandbox_policy(settings),
            egress=egress,
        ),
        redactor=Redactor(secrets),
        leases=leases,
    )


async def start(nc: Client, settings: ToolsSettings) -> Callable[[], Awaitable[None]]:
    """Open the session store, start the grep workers and serve the endpoints."""
    settings = narrow(settings, ToolsSettings)
    # Swarm workers' writes are checked against the lease table (calls without a lease holder never read it).
    leases = await LeaseTable.open(nc, replicas=settings.stream_replicas)
    executor = build_executor(settings, nc=nc, leases=leases)
    warning = await asyncio.to_thread(sandbox_warning, settings)
    if warning:
        log.warning("%s", warning)
    else:
        caps = capabilities()
        log.info("agent commands confined (Landlock ABI %d, user/PID/mount/network namespaces)",
                 caps.landlock_abi)
    if settings.sandbox != "off":
        # Started now, from this (the loop's) thread, whose end would take it down: not at the first command.
        held = await executor.launcher.limits()
        if held:
            log.info("agent commands' resource limits held by: %s",
                     "; ".join(f"{name}: {how}" for name, how in held.items()))
        else:
            log.warning("the sandbox's launch server did not start; shell commands will fail until it does")
    egress = executor.settings.egress
    for problem in egress.registries.problems:
        log.warning("a registry configuration could not be read, preflight will not use it: %s", problem)
    if egress.registries.hosts or egress.registries.read_paths:
        log.info("preflight commands also reach this machine's pip/npm registries: %s",
                 ", ".join((*egress.registries.hosts, *egress.registries.read_paths)))
    await asyncio.to_thread(executor.store.prune, older_than=time.time() - _KEEP_SESSIONS_SECONDS)
    await asyncio.to_thread(executor.engine.start)
    router = CancelRouter(executor, nc)
    await router.start()
    service = TypedService(nc, name="tools", description="Every agent tool of seed 004, confined to a worktree")
    service.endpoint(CALL, ToolCall, executor.call)
    service.endpoint(LIST_TOOLS, ListTools, executor.list_tools)
    service.endpoint(FILE_ACCESS, GetFileAccess, executor.file_access)
    service.endpoint(CANCEL, CancelToolCall, router.cancel)
    await service.start()
    log.info("tools: session store %s, %d grep workers", executor.store.path, executor.engine.workers)

    async def stop() -> None:
        await service.stop()
        await router.stop()
        await asyncio.to_thread(executor.close)

    return stop
