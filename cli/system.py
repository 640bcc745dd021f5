"""``autarch up | status | events | replay | config``: running and inspecting the system."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from typing import Any

import msgspec

from autarch.runtime.settings import MAX_PARTITIONS, SECRET_SETTINGS, Settings, SettingsError, load_settings

__all__ = ["register"]


def _settings(args: argparse.Namespace) -> Settings:
    overrides = {
        "data_dir": getattr(args, "data_dir", None),
        "port": getattr(args, "port", None),
        "nats_url": getattr(args, "nats", None),
        "postgres_url": getattr(args, "postgres_url", None),
    }
    try:
        return load_settings(overrides)
    except SettingsError as exc:
        print(f"autarch: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _running_cluster(settings: Settings) -> Settings:
    """``settings`` pointed at every node of the local cluster ``autarch up --cluster`` runs from this data dir
    (listed in its ``run.json``), so that a client reaches the cluster while any one node lives."""
    if settings.nats_url is not None:
        return settings
    try:
        url = json.loads((settings.data_path / "run.json").read_text()).get("nats_url") or ""
    except (OSError, ValueError):
        return settings
    return msgspec.structs.replace(settings, nats_url=url) if "," in url else settings


def _common(parser: argparse.ArgumentParser, *, port: bool = False) -> None:
    parser.add_argument("--data-dir", help="data directory (env AUTARCH_DATA_DIR; default ~/.local/share/autarch)")
    parser.add_argument("--nats", metavar="URL", help="use this NATS server instead of the embedded one")
    if port:
        parser.add_argument("--port", type=int, help="gateway port (env AUTARCH_PORT; default 8765)")


def cmd_up(args: argparse.Namespace) -> int:
    from autarch.cli.local.supervisor import AVAILABLE_SERVICES, CannotStart, Supervisor
    from autarch.runtime.action_links import key_of
    from autarch.runtime.process import configure_logging
    from autarch.runtime.token import ensure_token

    settings = _settings(args)
    configure_logging(settings.log_level)
    ensure_token(settings.token_path)
    key_of(settings.data_path)  # made here, before the gateway and the notifier both read it at once
    services = tuple(args.services.split(",")) if args.services else AVAILABLE_SERVICES
    unknown = sorted(set(services) - set(AVAILABLE_SERVICES))
    if unknown:
        print(f"autarch up: unknown or uninstalled services: {', '.join(unknown)}", file=sys.stderr)
        return 2
    cluster = args.cluster or 0
    if cluster < 0 or (args.instances is not None and args.instances < 1):
        print("autarch up: --cluster must be 1 or more nodes and --instances 1 or more", file=sys.stderr)
        return 2
    instances = args.instances or (2 if cluster else 1)
    if args.partitions is not None and not 1 <= args.partitions <= MAX_PARTITIONS:
        print(f"autarch up: --partitions must be between 1 and {MAX_PARTITIONS}", file=sys.stderr)
        return 2
    # A cluster's orchestrators all work (one partition each) unless told otherwise.
    partitions = args.partitions or (instances if cluster and settings.orchestrator_partitions == 1
                                     else settings.orchestrator_partitions)
    settings = msgspec.structs.replace(settings, orchestrator_partitions=partitions)
    if cluster and (settings.nats_url or not settings.postgres_url):
        print("autarch up: --cluster runs its own NATS nodes (no --nats) and needs PostgreSQL event stores: "
              "--postgres-url postgresql://user@host:5432/db?schema=NAME (or AUTARCH_POSTGRES_URL)", file=sys.stderr)
        return 2
    supervisor = Supervisor(settings, services=services, cluster=cluster, instances=instances)
    try:
        supervisor.claim()  # the data dir's lock and free ports, before the banner says anything is starting
    except CannotStart as exc:
        print(f"autarch up: {exc}", file=sys.stderr)
        return 1
    if cluster:
        nodes = ",".join(str(settings.nats_port + i) for i in range(cluster))
        print(f"Autarch starting a local cluster: {cluster} NATS nodes (ports {nodes}), {instances} instances of "
              f"{', '.join(services)} and the gateway (ports {settings.port}..{settings.port + instances - 1})",
              flush=True)
        print(f"  stores   {_store_line(settings.postgres_url or '')}", flush=True)
    else:
        print(f"Autarch starting: services {', '.join(services)} + gateway", flush=True)
    if partitions > 1:
        print(f"  orchestrator  {partitions} partitions of the workflows, each led by one instance", flush=True)
    print(f"  API      http://{settings.host}:{settings.port}  (OpenAPI at /schema, health at /healthz)", flush=True)
    print(f"  UI       http://{settings.host}:{settings.port}/  (sign in with `autarch ui`)", flush=True)
    print(f"  token    {settings.token_path}  (send 'Authorization: Bearer <token>')", flush=True)
    print(f"  data     {settings.data_path}", flush=True)
    if not cluster:
        print(f"  NATS     {settings.effective_nats_url}{'' if settings.nats_url else ' (embedded)'}", flush=True)
    print("  stop     Ctrl-C", flush=True)
    if "agent_runner" in services:
        print(f"  model    {_model_line(settings)}", flush=True)
    try:
        code = asyncio.run(supervisor.run())
    except CannotStart as exc:
        print(f"autarch up: {exc}", file=sys.stderr)
        return 1
    except (RuntimeError, ValueError) as exc:
        if not cluster:
            raise
        print(f"autarch up: the local cluster did not start: {exc}", file=sys.stderr)
        return 1
    if supervisor.cannot_start:
        print(f"autarch up: stopped: {supervisor.cannot_start} cannot start (its reason is in the log above)",
              file=sys.stderr)
    return code


def _store_line(url: str) -> str:
    """The PostgreSQL URL without its password."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    host = f"{parsed.hostname}:{parsed.port or 5432}"
    return parsed._replace(netloc=f"{parsed.username + '@' if parsed.username else ''}{host}").geturl()


def _model_line(settings: Settings) -> str:
    """Where agent turns go, and a warning when they cannot work (no key for Anthropic's own API)."""
    if settings.anthropic_base_url:
        return f"{settings.anthropic_base_url}{'' if settings.anthropic_api_key else ' (no API key set)'}"
    if settings.anthropic_api_key:
        return "Anthropic API (key from the settings)"
    return ("Anthropic API, but NO API KEY is set: every agent turn will fail with 401. Set ANTHROPIC_API_KEY "
            "(or AUTARCH_ANTHROPIC_BASE_URL for another endpoint), or try `autarch demo` offline.")


async def _instance_stats(nc: Any, name: str, instances: int, *, wait: float = 1.0) -> list[dict[str, Any]]:
    """``$SRV.STATS`` of every instance of ``name`` (each keeps its own counts), as many as answer within ``wait``."""
    inbox = nc.new_inbox()
    answers: list[dict[str, Any]] = []
    all_in = asyncio.Event()

    async def on_reply(msg: Any) -> None:
        try:
            answers.append(json.loads(msg.data))
        except ValueError:
            return
        if len(answers) >= instances:
            all_in.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(f"$SRV.STATS.{name}", b"", reply=inbox)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_in.wait(), wait)
    finally:
        await sub.unsubscribe()
    return answers


def _totals(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests, errors and mean processing time over every endpoint of every instance that answered."""
    endpoints = [e for stats in answers for e in stats.get("endpoints") or []]
    processing_ns = sum(e.get("processing_time", 0) for e in endpoints)
    # Our services report the requests still in flight, whose time is not in processing_time yet.
    answered = sum(
        e.get("num_requests", 0) - (e["data"].get("in_flight", 0) if isinstance(e.get("data"), dict) else 0)
        for e in endpoints
    )
    last_errors = [e["last_error"] for e in endpoints if e.get("last_error")]
    return {
        "requests": sum(e.get("num_requests", 0) for e in endpoints),
        "errors": sum(e.get("num_errors", 0) for e in endpoints),
        "average_ms": round(processing_ns / answered / 1e6, 3) if answered > 0 else 0.0,
        "last_error": last_errors[-1] if last_errors else None,
        "started": min((stats["started"] for stats in answers if stats.get("started")), default=None),
    }


async def _status(settings: Settings, services: list[str]) -> dict[str, Any]:
    from autarch.gateway.health import partitions_served, ping_service, service_problems, service_up
    from autarch.runtime.bus import connect

    try:
        nc = await connect(settings.effective_nats_url, name="autarch-status", connect_timeout=2, reconnect=False)
    except Exception as exc:
        return {"nats": False, "error": str(exc), "services": {}}
    try:
        result: dict[str, Any] = {"nats": True, "services": {}}
        for name in services:
            # Every instance that answers within the window is counted (a status lists them all).
            found = await ping_service(nc, name, wait=0.5, enough=lambda _: False)
            instances = len(found)
            problems = service_problems(found)
            entry: dict[str, Any] = {"ok": service_up(found) and not problems, "instances": instances}
            if problems:
                entry["problems"] = [{"kind": p.kind, "path": p.path, "message": p.message} for p in problems]
            count, served = partitions_served(found)
            if count > 1:
                entry["partitions"] = {"count": count, "served": sorted(served)}
            if instances:
                answers = await _instance_stats(nc, name, instances)
                if answers:
                    entry.update(_totals(answers))
            result["services"][name] = entry
        return result
    finally:
        await nc.close()


def cmd_status(args: argparse.Namespace) -> int:
    from autarch.cli.local.supervisor import AVAILABLE_SERVICES

    settings = _running_cluster(_settings(args))
    result = asyncio.run(_status(settings, list(AVAILABLE_SERVICES)))
    run_file = settings.data_path / "run.json"
    if run_file.exists():
        result["supervisor"] = json.loads(run_file.read_text())
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"NATS {settings.effective_nats_url}: {'up' if result['nats'] else 'DOWN ' + result.get('error', '')}")
        for name, entry in result["services"].items():
            n = entry["instances"]
            parts = entry.get("partitions")
            served = f", partitions {len(parts['served'])}/{parts['count']}" if parts else ""
            if entry["ok"]:
                state = f"ok ({n} instance{'s' if n != 1 else ''}{served})"
            elif entry.get("problems"):
                state = f"DEGRADED ({n} instance{'s' if n != 1 else ''}{served})"
            else:
                state = f"DOWN{served}"
            extra = (
                f"  requests {entry['requests']}, errors {entry['errors']}, avg {entry['average_ms']:.1f} ms"
                if "requests" in entry
                else ""
            )
            print(f"  {name:<13} {state}{extra}")
            for problem in entry.get("problems", []):
                print(f"  {'':<13} {problem['kind']}: {problem['path']}: {problem['message']}")
            if entry.get("errors") and entry.get("last_error"):
                print(f"  {'':<13} last error: {entry['last_error'][:200]}")
    healthy = result["nats"] and all(e["ok"] for e in result["services"].values())
    return 0 if healthy else 1


async def _tail(settings: Settings, workflow: str | None, since: int | None, limit: int | None) -> None:
    from nats.js.api import ConsumerConfig, DeliverPolicy

    from autarch.contracts import subjects
    from autarch.runtime.bus import connect, ensure_event_stream

    try:
        nc = await connect(settings.effective_nats_url, name="autarch-events", connect_timeout=2, reconnect=False)
    except Exception as exc:
        raise SystemExit(f"autarch events: cannot reach NATS at {settings.effective_nats_url}: {exc}") from None
    await ensure_event_stream(nc, duplicate_window=settings.duplicate_window)
    subject = subjects.run_events(workflow) if workflow else subjects.EVENTS_ALL
    if since is None:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
    else:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=since + 1)
    sub = await nc.jetstream().subscribe(subject, stream=subjects.EVENTS_STREAM, ordered_consumer=True, config=config)
    seen = 0
    try:
        async for msg in sub.messages:
            event_type = (msg.headers or {}).get("Autarch-Event") or subjects.event_type_from_subject(msg.subject)
            print(f"{msg.metadata.sequence.stream}\t{event_type}\t{msg.data.decode()}", flush=True)
            seen += 1
            if limit is not None and seen >= limit:
                return
    finally:
        await nc.close()


def cmd_events(args: argparse.Namespace) -> int:
    settings = _running_cluster(_settings(args))
    try:
        asyncio.run(_tail(settings, args.workflow, args.since, args.limit))
    except KeyboardInterrupt:
        pass
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from autarch.services.orchestrator.replay import replay_from_store

    settings = _settings(args)
    try:
        result = replay_from_store(settings, args.workflow_id, at=args.at)
    except (LookupError, ValueError) as exc:
        print(f"autarch replay: {exc}", file=sys.stderr)
        return 1
    print(msgspec.json.format(msgspec.json.encode(result), indent=2).decode())
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    settings = _settings(args)
    shown = msgspec.structs.asdict(settings)
    for secret in SECRET_SETTINGS:
        if shown.get(secret):
            shown[secret] = "***"
    print(msgspec.json.format(msgspec.json.encode(shown), indent=2).decode())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser("up", help="start NATS, every service and the gateway on this machine")
    _common(up, port=True)
    up.add_argument("--services", help="comma-separated subset of services to run (default: all installed)")
    up.add_argument("--cluster", type=int, metavar="N",
                    help="scale-out on this machine: N NATS nodes in one JetStream cluster (3 for replicas 3), "
                         "PostgreSQL event stores, several instances of every service")
    up.add_argument("--instances", type=int, metavar="M",
                    help="processes of every service and of the gateway (default 2 with --cluster, else 1)")
    up.add_argument("--partitions", type=int, metavar="P",
                    help="split the orchestrator's workflows into P partitions, each served by one instance at a "
                         "time (default: --instances with --cluster, else 1; env AUTARCH_ORCHESTRATOR_PARTITIONS)")
    up.add_argument("--postgres-url", metavar="URL",
                    help="PostgreSQL event stores, postgresql://user@host:5432/db[?schema=NAME] "
                         "(env AUTARCH_POSTGRES_URL)")
    up.set_defaults(handler=cmd_up)

    status = sub.add_parser("status", help="show each service and its health")
    _common(status)
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=cmd_status)

    events = sub.add_parser("events", help="tail the event stream")
    _common(events)
    events.add_argument("--workflow", metavar="ID", help="only this workflow's events")
    events.add_argument("--since", type=int, metavar="SEQ", help="start after this stream sequence (0: from the start)")
    events.add_argument("--limit", type=int, metavar="N", help="exit after N events")
    events.set_defaults(handler=cmd_events)

    replay = sub.add_parser("replay", help="rebuild a workflow's state from its event log alone")
    _common(replay)
    replay.add_argument("workflow_id")
    replay.add_argument("--at", type=int, metavar="N", help="state after the workflow's N-th event (N >= 1)")
    replay.set_defaults(handler=cmd_replay)

    config = sub.add_parser("config", help="show the effective settings")
    _common(config, port=True)
    config.set_defaults(handler=cmd_config)
