"""``autarch audit verify [ID] | export ID``: prove the event log untouched (``docs/audit.md``)."""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from autarch.runtime.settings import Settings

from .system import _common, _running_cluster, _settings

__all__ = ["register"]


def _open_store(settings: Settings, service: str) -> Any | None:
    """The service's application on its store, or None when an embedded store was never made."""
    from autarch.runtime.eventstore import event_store_env

    if not settings.postgres_url and not (settings.data_path / service / "events.sqlite").exists():
        return None
    env = event_store_env(settings, service)
    if service == "orchestrator":
        from autarch.services.orchestrator.application import WorkflowApplication

        return WorkflowApplication(env=env)
    from autarch.services.agent_runner.application import SessionApplication

    return SessionApplication(env=env)


def _runner_wire(app: Any) -> Any:
    """The agent runner's relay mapping (``ContractMapper``), each session's run read from its own events."""
    from autarch.services.agent_runner.contract_events import ContractMapper

    workflows: dict[str, str | None] = {}

    def run_of(session_id: str) -> str | None:
        if session_id not in workflows:
            workflows[session_id] = app.get_session(session_id).run_id
        return workflows[session_id]

    return ContractMapper(run_of=run_of)


async def _verify(settings: Settings, args: argparse.Namespace) -> tuple[list[Any], str | None]:
    from autarch.contracts import subjects
    from autarch.runtime.audit import (
        AuditReport,
        StreamUnavailable,
        read_stream,
        relay_position,
        verify_store,
        verify_stream,
    )
    from autarch.runtime.bus import close_quietly, connect
    from autarch.services.orchestrator.audit import verify_orchestrator

    reports = []
    stream_error = None
    nc = None
    messages = None
    if not args.no_stream:
        try:
            nc = await connect(settings.effective_nats_url, name="autarch-audit", connect_timeout=2, reconnect=False)
            if args.id is None:  # read once, checked against each store
                messages = await read_stream(nc, subjects.EVENTS_STREAM, subjects.EVENTS_ALL)
        except StreamUnavailable as exc:
            stream_error = str(exc)
        except Exception as exc:
            stream_error = f"cannot reach NATS at {settings.effective_nats_url}: {exc}"
        if stream_error and nc is not None:
            await close_quietly(nc)
            nc = None
    try:
        orchestrator = _open_store(settings, "orchestrator")
        if orchestrator is None:
            raise LookupError(f"no orchestrator event store under {settings.data_path}")
        try:
            try:
                reports.append(await verify_orchestrator(orchestrator, nc, args.id, messages=messages))
            except StreamUnavailable as exc:
                stream_error = str(exc)
                reports.append(await verify_orchestrator(orchestrator, None, args.id))
        finally:
            orchestrator.close()
        runner = None if args.id else _open_store(settings, "agent_runner")
        if runner is not None:
            try:
                report = AuditReport(store=runner.name)
                verify_store(runner, report)
                if messages is not None:
                    verify_stream(runner, _runner_wire(runner), messages, report, position=relay_position(runner))
                reports.append(report)
            finally:
                runner.close()
    finally:
        if nc is not None:
            await close_quietly(nc)
    return reports, stream_error


def cmd_verify(args: argparse.Namespace) -> int:
    settings = _running_cluster(_settings(args))
    try:
        reports, stream_error = asyncio.run(_verify(settings, args))
    except (LookupError, ValueError, TypeError) as exc:
        print(f"autarch audit verify: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([{
            "store": r.store, "ok": r.ok, "aggregates": r.aggregates, "events": r.events, "chained": r.chained,
            "checkpoints": r.checkpoints, "stream_messages": r.stream_messages,
            "heads": {k: {"version": v, "link": d} for k, (v, d) in r.heads.items()},
            "findings": [{"kind": f.kind, "aggregate": f.aggregate, "version": f.version, "stream_seq": f.stream_seq,
                          "tampering": f.tampering, "detail": f.detail} for f in r.findings],
        } for r in reports], indent=2))
    else:
        for r in reports:
            stream = "stream not checked" if r.stream_messages is None else f"{r.stream_messages} stream message(s)"
            print(f"{r.store}: {r.aggregates} aggregate(s), {r.events} event(s) ({r.chained} chained), "
                  f"{r.checkpoints} checkpoint(s), {stream}")
            if args.id:
                for aggregate, (version, digest) in sorted(r.heads.items()):
                    print(f"  head: aggregate {aggregate} version {version} link {digest}")
            for finding in r.findings:
                print(f"  {finding.line()}")
            print(f"  {'OK' if r.ok else 'TAMPERED'}")
    if stream_error:
        print(f"autarch audit verify: the stream was not checked: {stream_error} (--no-stream skips it)",
              file=sys.stderr)
    if not all(r.ok for r in reports):
        return 1
    return 3 if stream_error else 0


def cmd_export(args: argparse.Namespace) -> int:
    from autarch.services.orchestrator.audit import export_bundle

    settings = _settings(args)
    app = _open_store(settings, "orchestrator")
    if app is None:
        print(f"autarch audit export: no orchestrator event store under {settings.data_path}", file=sys.stderr)
        return 2
    try:
        bundle = export_bundle(app, args.id)
    except (LookupError, ValueError) as exc:
        print(f"autarch audit export: {exc}", file=sys.stderr)
        return 2
    finally:
        app.close()
    out = Path(args.output or f"audit-{bundle['id']}.json")
    out.write_text(json.dumps(bundle, indent=1) + "\n")
    verifier = out.parent / "audit_verify.py"
    # The standalone verifier goes beside the bundle: whoever receives both checks it with Python alone.
    shutil.copyfile(Path(__file__).with_name("audit_verify.py"), verifier)
    events = sum(len(a["events"]) for a in bundle["aggregates"])
    commits = len(bundle.get("git", {}).get("commits", []))
    print(f"wrote {out}: {len(bundle['aggregates'])} aggregate(s), {events} event(s), "
          f"{len(bundle['checkpoints'])} checkpoint(s), {commits} commit(s); check it with: "
          f"python3 {verifier} {out}")
    for line in bundle["store_findings"]:
        print(f"  {line}")
    return 0


def _store_options(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--postgres-url", metavar="URL",
                        help="the PostgreSQL event stores, as `autarch up` was given them (env AUTARCH_POSTGRES_URL)")


def register(sub: argparse._SubParsersAction) -> None:
    audit = sub.add_parser("audit", help="prove the event log untouched: verify the hash chains, export a bundle")
    verbs = audit.add_subparsers(dest="audit_command", metavar="VERB")
    verbs.required = True
    verify = verbs.add_parser("verify", help="check the stores, their hash chains, checkpoints and the stream")
    _store_options(verify)
    verify.add_argument("id", nargs="?", help="only this workflow (with its epic and mail), loop session or aggregate")
    verify.add_argument("--no-stream", action="store_true", help="check the stores only (NATS not needed)")
    verify.add_argument("--json", action="store_true", help="machine-readable output")
    verify.set_defaults(handler=cmd_verify)
    export = verbs.add_parser("export", help="write a bundle the standalone audit_verify.py checks offline")
    _store_options(export)
    export.add_argument("id", help="a workflow, loop session or aggregate id")
    export.add_argument("-o", "--output", metavar="FILE", help="bundle path (default audit-ID.json here)")
    export.set_defaults(handler=cmd_export)
