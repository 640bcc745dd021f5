"""The ``shell`` tool, in its pulsing and preflight variants.

Every command runs in the sandbox of :mod:`.sandbox` (or is refused with the reason where none exists), started
by the executor's launch server (:mod:`.sandbox_client`); a command stopped at one of the sandbox's resource
limits fails with a sentence naming the limit, its value and the setting that raises it, and a ``limit`` field
(``{"name", "value", "unit", "setting"}``) beside the seed's fields.
Output is redacted before it is truncated (a secret cut in half would no longer be recognised),
with the values found in the worktree's sensitive files added to the redactor: a command is not
confined by the path checks (the worktree is all its own), so ``cat .env`` must still not leak ``.env``'s
values. The preflight variant also compares the tracked files before and after the command: any tracked file the
command left modified turns the result into a failure. A swarm worker's command (``lease_holder``) is checked
against the file leases of other workers the same way, and what it changed of theirs is put back (an error);
what it changed outside its bead's files is put back too and reported in ``outside_scope`` beside the
command's own outcome (:mod:`.lease_guard`).

Both guards run git outside the sandbox, so they run it as :mod:`.gitrecord` says: on the git directory of the
worktree's record, never on what its ``.git`` names. A linked worktree's ``.git`` file is checked against the
record before and after the command; a changed one is written back at once and the call fails with ``code``
``git_file_tampered`` (before: the command does not run).
"""

from __future__ import annotations

import asyncio
from typing import Any

from autarch.contracts.tool_args import ShellArgs

from .context import ToolContext
from .egress import CommandNetwork, command_network
from .gitrecord import GIT_FILE_TAMPERED, GitRecord, HostGit, NoGitRecord, dot_git_tampered, restore_dot_git
from .gitstate import GitStateError, changed_tracked_files, tracked_state
from .lease_guard import ShellLeaseGuard
from .sandbox import LAUNCH_FAILED, MIB, Launch, SandboxUnavailable, prepare_launch, sandbox_environment
from .sensitivity import worktree_secret_values
from .shell import LimitHit, ShellOutcome, effective_timeout, run_command, truncate_output

__all__ = ["limit_report", "shell"]

_LIMITS = {
    # name: (setting, unit, bytes per unit, what it bounds)
    "memory": ("sandbox_memory_mib", "MiB", MIB, "memory limit"),
    "processes": ("sandbox_processes", "processes and threads", 1, "limit"),
    "file_size": ("sandbox_file_size_mib", "MiB", MIB, "file size limit"),
    "write": ("sandbox_write_mib", "MiB", MIB, "limit on bytes written to files"),
    "cpu": ("sandbox_cpu_seconds", "seconds", 1, "CPU time limit"),
}


def limit_report(hit: LimitHit) -> tuple[str, dict[str, Any]]:
    """The sentence and the ``limit`` field of a result whose command reached ``hit``."""
    setting, unit, scale, what = _LIMITS[hit.name]
    value = hit.value // scale if hit.value % scale == 0 else round(hit.value / scale, 2)
    field = {"name": hit.name, "value": value, "unit": unit, "setting": setting}
    limit = f"the sandbox's {what} of {value} {unit} (setting {setting})"
    if hit.name == "file_size":
        return (f"A process of the command was killed (SIGXFSZ) for writing a file past {limit}; the file was cut "
                "at the limit", field)
    # Memory and processes are held by the kernel itself (an OOM kill, a refused fork), whenever it is noticed.
    if hit.name == "memory":
        return f"Command stopped: its processes reached {limit}", field
    if hit.name == "processes":
        return f"Command stopped: it reached {limit}", field
    used = f"it wrote {hit.used / MIB:.0f} MiB to files" if hit.name == "write" else \
        f"its processes used {hit.used:g} s of CPU time"
    if not hit.stopped:
        return f"Command exceeded {limit}: {used} before it ended by itself", field
    return f"Command stopped: {used}, past {limit}", field


def _tamper_check(record: GitRecord) -> str | None:
    """None when the worktree's ``.git`` is what the record says; else put it back and say what happened."""
    what = dot_git_tampered(record)
    if what is None:
        return None
    try:
        restore_dot_git(record)
    except OSError as exc:
        return (f"The worktree's .git was changed ({what}) and could NOT be restored from Autarch's records ({exc}); "
                "report this to the user")
    return (f"The worktree's .git file was changed ({what}); it was restored from Autarch's records. It belongs to "
            "Autarch: leave .git alone and use git's own commands")


async def shell(ctx: ToolContext, args: ShellArgs) -> Any:
    root = ctx.worktree.root
    timeout = effective_timeout(args.timeout_seconds)
    policy = ctx.settings.sandbox
    label = f"session {ctx.call.session_id} call {ctx.call.tool_call_id}"
    record: GitRecord | None = None
    no_record = ""
    if ctx.git_records is not None:
        try:
            record = await ctx.git_records.lookup(root)
        except NoGitRecord as exc:
            no_record = str(exc)
    else:
        no_record = "this tools service keeps no git records"
    if record is not None:
        # Before anything else runs: the command's own sandbox must not be built on a changed .git.
        tampered = await asyncio.to_thread(_tamper_check, record)
        if tampered is not None:
            return {"success": False, "error": f"Command not run: {tampered}", "code": GIT_FILE_TAMPERED}
    async with command_network(ctx.settings.egress, policy, preflight=ctx.variant == "preflight",
                               label=label) as network:
        try:
            launch = await asyncio.to_thread(prepare_launch, policy, args.command, root=root, git=record,
                                             network=network)
        except SandboxUnavailable as exc:
            return {"success": False, "error": f"Command refused: {exc}"}
        try:
            git: HostGit | str = no_record
            if record is not None and ctx.git_records is not None:
                try:
                    git = await ctx.git_records.host_git(record, sandbox_environment(policy, home=None))
                except NoGitRecord as exc:
                    git = str(exc)
            return await _run(ctx, args, launch, timeout=timeout, git=git, record=record, network=network)
        finally:
            await asyncio.to_thread(launch.cleanup)


async def _run(ctx: ToolContext, args: ShellArgs, launch: Launch, *, timeout: float, git: HostGit | str,
               record: GitRecord | None, network: CommandNetwork) -> Any:
    root = ctx.worktree.root
    before = None
    if ctx.variant == "preflight":
        if isinstance(git, str):
            return {"success": False, "error": f"Preflight commands must run in a git worktree: {git}"}
        try:
            before = await tracked_state(git)
        except GitStateError as exc:
            return {"success": False, "error": f"Preflight commands must run in a git worktree: {exc}"}
    guard = None
    if ctx.call.lease_holder is not None:
        guard = ShellLeaseGuard(ctx, git=git)
        refused = await guard.before()
        if refused is not None:
            return {"success": False, "error": refused}
    try:
        outcome = await _execute(ctx, launch, timeout=timeout)
    except OSError as exc:
        return {"success": False, "error": f"Could not start the command: {exc.strerror or exc}"}
    except asyncio.CancelledError:
        if record is not None:  # a stopped command may have changed .git too: put it back first
            await asyncio.shield(asyncio.to_thread(_tamper_check, record))
        if guard is not None:  # a stopped command's processes are dead: still put other workers' files back
            await asyncio.shield(guard.after())
        raise
    # Before anything else runs on the worktree (the guards' git reads none of .git, but the next command would).
    tampered = await asyncio.to_thread(_tamper_check, record) if record is not None else None
    if outcome.exit_code == LAUNCH_FAILED and outcome.stderr.startswith("autarch-sandbox: "):
        reason = outcome.stderr.removeprefix("autarch-sandbox: ").strip()
        return {"success": False, "error": f"The sandbox could not start the command: {reason}"}
    # Said beside the output, in the call's result: pip only says "Temporary failure in name resolution".
    note = network.note(ctx.settings.sandbox, outcome.stdout, outcome.stderr)
    redactor = ctx.redactor.with_literals(await asyncio.to_thread(worktree_secret_values, root))
    limit = ctx.settings.shell_output_chars
    stdout = truncate_output(redactor.redact(outcome.stdout), limit)
    stderr = truncate_output(redactor.redact(outcome.stderr), limit)
    errors = [tampered] if tampered is not None else []
    limit_field = None
    if outcome.timed_out:
        errors.append(f"Command timed out after {timeout:g} seconds")
    if outcome.lost is not None:
        errors.append(outcome.lost)
    if outcome.limit is not None:
        sentence, limit_field = limit_report(outcome.limit)
        errors.append(sentence)
    if before is not None:
        assert isinstance(git, HostGit)
        try:
            changed = changed_tracked_files(before, await tracked_state(git))
        except GitStateError as exc:
            changed = [f"(git status failed: {exc})"]
        if changed:
            errors.append("Preflight must not modify tracked files; this command left modified: " + ", ".join(changed))
    leased = await guard.after() if guard is not None else None
    if leased is not None and "error" in leased:
        errors.append(leased.pop("error"))
    if errors:
        result: dict[str, Any] = {"success": False, "error": "; ".join(errors), **(leased or {})}
        if tampered is not None:
            result["code"] = GIT_FILE_TAMPERED
        if limit_field is not None:
            result["limit"] = limit_field
        if outcome.exit_code is not None:
            result["exit_code"] = outcome.exit_code
        result.update(stdout=stdout, stderr=stderr)
        if note:
            result["sandbox"] = note
        return result
    result = {"success": True, "exit_code": outcome.exit_code, "stdout": stdout, "stderr": stderr, **(leased or {})}
    if note:
        result["sandbox"] = note
    return result


async def _execute(ctx: ToolContext, launch: Launch, *, timeout: float) -> ShellOutcome:
    if launch.confined and ctx.launcher is not None:
        return await ctx.launcher.run(launch, timeout=timeout)
    return await run_command(launch.argv, cwd=launch.cwd or ctx.worktree.root, timeout=timeout, env=launch.env,
                             own_session=launch.own_session)
