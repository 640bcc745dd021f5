"""Start-up benchmark (a script, not a test): ``autarch up`` on a data dir with a long history behind it.
Its last line is a JSON object of the figures.

    python tests/benchmarks/startup.py [--workflows 10000] [--loops 1000] [--data DIR] [--keep DIR]

Issue 34 asks that ``autarch up`` on a data dir holding 10,000 finished workflows and 1,000 loop sessions be
healthy within 5 s and list the first page within 100 ms. Running that many workflows would take hours, so the
history is made the way a real run leaves it, then copied:

1. **Templates**: a real system (every service, the scripted model in this process) runs one demo workflow to
   completion and one loop session of ``--loop-iterations`` iterations. What every service's event store, snapshot
   table and relay position then hold is exactly what a finished workflow and a finished loop session leave.
2. **Copies**: every aggregate a template left in a service's store (the workflow, its agent sessions, …: each
   aggregate whose events name the template's id) is written again under fresh ids, through that store's own
   recorder (so each copy's hash chain is its own), until the store holds ``--workflows`` workflows and ``--loops``
   sessions; so is each such aggregate's kept view (``runtime/kept_views.py``: what a real run wrote when it
   settled). The relay's position is moved past the copies: a real run published them long ago.
3. **Start-up**: ``autarch up`` (every service) on that data dir, timed to ``/healthz`` answering 200; then the
   lists the web UI and the CLI ask for: ``GET /api/workflows`` (its default page, the first 50, and what the UI's
   list asks: the count, the newest 500 and their costs), ``GET /api/pulse`` (its default page and the UI's
   ``limit=1000``), each the median of several requests, the first one apart; then each process's resident memory.

``--data DIR`` reuses a data dir built before (``--keep DIR`` keeps the one built): the copies take a minute or
two to write, the start-up a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import nats
from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent, Tracking

from autarch.cli.demo_cmd import create_workflow, demo_scenario, drive, make_sample_repo
from autarch.cli.gateway_client import CliError
from autarch.cli.local_system import LocalSystem
from autarch.contracts import subjects
from autarch.contracts.loops import GetLoop, LoopView, StartLoop
from autarch.runtime import sqlite_store
from autarch.runtime.requests import request
from autarch.services.scripted_model import ScriptedModelServer

# Run as a script: its sibling benchmarks are imported by their plain names, which mypy cannot resolve.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from growth import peak_rss_mb, processes, status_mb  # type: ignore[import-not-found]  # a sibling script, see above
from loops import make_repo  # type: ignore[import-not-found]  # a sibling script, see above
from loops import scenario as loop_scenario  # type: ignore[import-not-found]  # a sibling script, see above

GOAL_HEALTHY_S = 5.0
GOAL_FIRST_PAGE_MS = 100.0
_RUN_FILES = shutil.ignore_patterns("run.json", "up.log")


# --- 1. templates -------------------------------------------------------------------------------------------------


async def run_loop(nats_url: str, repo: Path, iterations: int) -> str:
    """One loop session of ``iterations`` on ``repo``, run to its end; its id."""
    nc = await nats.connect(nats_url)
    try:
        command = StartLoop(session_id=str(uuid.uuid4()), project_name=repo.name, project_path=str(repo),
                            goal="Write the benchmark steps", max_iterations=iterations, script="bench")
        view = await request(nc, subjects.request("orchestrator", "start_loop"), command, LoopView, timeout=30)
        deadline = time.monotonic() + 120 + 10 * iterations
        while time.monotonic() < deadline:
            view = await request(nc, subjects.request("orchestrator", "get_loop"), GetLoop(session_id=view.id),
                                 LoopView, timeout=30)
            if view.status not in ("pending", "running"):
                break
            await asyncio.sleep(0.25)
        if view.status != "complete":
            raise SystemExit(f"the template loop session ended {view.status}, not complete")
        return view.id
    finally:
        await nc.close()


def make_templates(tmp: Path, data: Path, iterations: int) -> tuple[str, str]:
    """Run one demo workflow and one loop session on ``data``; (workflow id, loop session id)."""
    scenario = demo_scenario()
    scenario["scripts"].update(loop_scenario(iterations)["scripts"])
    with ScriptedModelServer(scenario) as model:
        system = LocalSystem(data, model.base_url,
                             extra_env={"AUTARCH_LOOP_MAX_ITERATIONS_LIMIT": str(max(iterations, 200))})
        system.start(timeout=120)
        try:
            repo = tmp / "repo"
            make_sample_repo(repo, scenario["files"])
            client = system.client(timeout=60)
            workflow_id = create_workflow(client, repo)
            outcome = drive(client, workflow_id, timeout=600, alive=system.alive)
            if outcome.status != "completed":
                raise SystemExit(f"the template workflow ended {outcome.status}: {outcome.message}")
            loop_id = asyncio.run(run_loop(f"nats://127.0.0.1:{system.nats_port}", make_repo(tmp / "loop-repo"),
                                           iterations))
        finally:
            system.stop()
    return workflow_id, loop_id


# --- 2. copies ----------------------------------------------------------------------------------------------------


def _store_app(path: Path) -> Application[uuid.UUID]:
    """An application on the store at ``path``, for its recorders (the project's own, chaining every event)."""
    return Application(env={"PERSISTENCE_MODULE": sqlite_store.MODULE, "SQLITE_DBNAME": str(path),
                            "SQLITE_LOCK_TIMEOUT": "30", sqlite_store.SYNCHRONOUS_ENV: "OFF"})


Rows = list[tuple[str, int, str, bytes]]


def _units(path: Path, roots: dict[str, str], table: str) -> dict[str, dict[str, Rows]]:
    """For each template root (its id → its name): the rows of ``table`` of every aggregate that is the root or
    whose events name it, by aggregate; aggregates naming no root (shared ones) are left out."""
    con = sqlite3.connect(path)
    try:
        found = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name=?", (table,)).fetchone()
        # Events in the order they were recorded (so copies list in the same order), snapshots by aggregate.
        order = "rowid" if table == "stored_events" else "originator_id, originator_version"
        rows = (con.execute(f"SELECT originator_id, originator_version, topic, state FROM {table} "
                            f"ORDER BY {order}").fetchall() if found else [])
    finally:
        con.close()
    by_aggregate: dict[str, Rows] = defaultdict(list)
    for oid, version, topic, state in rows:
        by_aggregate[oid].append((oid, version, topic, bytes(state)))
    units: dict[str, dict[str, Rows]] = {name: {} for name in roots.values()}
    for oid, events in by_aggregate.items():
        text = b"".join(e[3] for e in events)
        for root, name in roots.items():
            if oid == uuid.UUID(root).hex or root.encode() in text or uuid.UUID(root).hex.encode() in text:
                units[name][oid] = events
                break
    return units


def _ids_in(unit: dict[str, Rows], root: str) -> list[str]:
    """The ids a copy of ``unit`` renames: its root's and each of its aggregates' (as hex)."""
    return sorted({uuid.UUID(root).hex, *unit})


def _spellings(ids: list[str]) -> tuple[re.Pattern[bytes], list[tuple[bytes, bytes]]]:
    """A pattern matching every id of ``ids`` in both its spellings (hex, and hyphenated), and those spellings."""
    pairs = [(old.encode(), str(uuid.UUID(old)).encode()) for old in ids]
    return re.compile(b"|".join(re.escape(s) for pair in pairs for s in pair)), pairs


def _kept(path: Path, unit: dict[str, Rows]) -> list[tuple[str, str, str, int, str, bytes]]:
    """The kept views (``runtime/kept_views.py``) of the aggregates of ``unit``, as rows of their table."""
    con = sqlite3.connect(path)
    try:
        found = con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='kept_views'").fetchone()
        rows = con.execute("SELECT kind, id, oid, version, shape, view FROM kept_views").fetchall() if found else []
    finally:
        con.close()
    return [(kind, key, oid, version, shape, bytes(view)) for kind, key, oid, version, shape, view in rows
            if oid in unit]


def copy_units(data: Path, roots: dict[str, str], counts: dict[str, int], *, batch: int = 200) -> dict[str, Any]:
    """Write ``counts[name] - 1`` more copies of each template unit into every store of ``data``."""
    written: dict[str, Any] = {}
    for path in sorted(data.glob("*/events.sqlite")):
        service = path.parent.name
        events = _units(path, roots, "stored_events")
        snapshots = _units(path, roots, "stored_snapshots")
        if not any(events.values()):
            continue
        app = _store_app(path)
        snapshot_recorder = app.factory.aggregate_recorder(purpose="snapshots")
        views = sqlite3.connect(path, timeout=30)
        per_service: dict[str, int] = {}
        for root, name in roots.items():
            unit, unit_snapshots = events[name], snapshots[name]
            if not unit:
                continue
            ids = _ids_in(unit, root)
            pattern, spellings = _spellings(ids)
            unit_kept = _kept(path, unit)
            pending: list[StoredEvent] = []
            pending_snapshots: list[StoredEvent] = []
            pending_kept: list[tuple[str, str, str, int, str, bytes]] = []
            for _ in range(counts[name] - 1):
                mapping = {old: uuid.uuid4().hex for old in ids}
                renames: dict[bytes, bytes] = {}
                for (hex_old, text_old), old in zip(spellings, ids, strict=True):
                    renames[hex_old] = mapping[old].encode()
                    renames[text_old] = str(uuid.UUID(mapping[old])).encode()

                def rename(state: bytes, renames: dict[bytes, bytes] = renames,
                           pattern: re.Pattern[bytes] = pattern) -> bytes:
                    return pattern.sub(lambda m: renames[m.group(0)], state)

                for source, target in ((unit, pending), (unit_snapshots, pending_snapshots)):
                    for oid, rows in source.items():
                        new_id = uuid.UUID(mapping.get(oid, oid))
                        target.extend(StoredEvent(originator_id=new_id, originator_version=version, topic=topic,
                                                  state=rename(state))
                                      for _, version, topic, state in rows)
                pending_kept.extend((kind, rename(key.encode()).decode(), rename(oid.encode()).decode(), version,
                                     shape, rename(view)) for kind, key, oid, version, shape, view in unit_kept)
                if len(pending) >= batch * sum(len(r) for r in unit.values()):
                    _write(app, snapshot_recorder, views, pending, pending_snapshots, pending_kept)
                    pending, pending_snapshots, pending_kept = [], [], []
            _write(app, snapshot_recorder, views, pending, pending_snapshots, pending_kept)
            per_service[name] = sum(len(r) for r in unit.values())
        # A real run published every event long ago: each relay of the store starts where the log ends.
        last = app.recorder.max_notification_id() or 0
        tracking = app.factory.tracking_recorder()
        for relay in _relays(path):
            if last > (tracking.max_tracking_id(relay) or 0):
                tracking.insert_tracking(Tracking(application_name=relay, notification_id=last))
        views.close()
        app.close()
        written[service] = {"events_per_copy": per_service, "events": last}
    return written


def _write(app: Application[uuid.UUID], snapshot_recorder: Any, views: sqlite3.Connection, events: list[StoredEvent],
           snapshots: list[StoredEvent], kept: list[tuple[str, str, str, int, str, bytes]]) -> None:
    """One batch of copies: events, then snapshots and kept views (each a cache of the events written first)."""
    if events:
        app.recorder.insert_events(events)
    if snapshots:
        snapshot_recorder.insert_events(snapshots)
    if kept:
        with views:
            views.executemany("INSERT OR REPLACE INTO kept_views VALUES (?,?,?,?,?,?)", kept)


def _relays(path: Path) -> list[str]:
    """The names the relays of the store at ``path`` track their positions under."""
    con = sqlite3.connect(path)
    try:
        rows = con.execute("SELECT DISTINCT application_name FROM tracking WHERE application_name LIKE 'relay-%'"
                           ).fetchall()
    except sqlite3.Error:
        rows = []
    finally:
        con.close()
    return [str(row[0]) for row in rows]


# --- 3. start-up --------------------------------------------------------------------------------------------------


def timed_get(system: LocalSystem, path: str, times: int = 7) -> dict[str, Any]:
    """``times`` GETs of ``path``: the first apart, the median of the others, and the count of items listed."""
    client = system.client(timeout=120)
    took, total, items = [], None, None
    for _ in range(times):
        started = time.perf_counter()
        try:
            body = client.get(path)
        except CliError as exc:
            return {"error": str(exc), "after_ms": round((time.perf_counter() - started) * 1000, 1)}
        took.append((time.perf_counter() - started) * 1000)
        total, items = body.get("total"), len(body.get("items", []))
    return {"first_ms": round(took[0], 1), "median_ms": round(statistics.median(took[1:]), 1), "items": items,
            "total": total}


UI_SHOWN = 500
"""How many of the newest workflows the web UI's list shows (``SHOWN`` in ``gateway/ui/static``)."""


def timed_ui_list(system: LocalSystem, times: int = 7) -> dict[str, Any]:
    """What the web UI's workflow list asks, ``times`` over: the count (``limit=1``), the newest :data:`UI_SHOWN`
    workflows, and their costs (``POST /api/workflows/costs``); the first apart, the median of the others."""
    client = system.client(timeout=120)
    took, items = [], 0
    for _ in range(times):
        started = time.perf_counter()
        try:
            total = client.get("/api/workflows", limit=1)["total"]
            page = client.get("/api/workflows", offset=max(0, total - UI_SHOWN), limit=UI_SHOWN)
            client.post("/api/workflows/costs", {"workflow_ids": [wf["id"] for wf in page["items"]]})
        except CliError as exc:
            return {"error": str(exc), "after_ms": round((time.perf_counter() - started) * 1000, 1)}
        took.append((time.perf_counter() - started) * 1000)
        items = len(page["items"])
    return {"first_ms": round(took[0], 1), "median_ms": round(statistics.median(took[1:]), 1), "items": items,
            "total": total}


def rss_mb(pid: int) -> float | None:
    return status_mb(pid, "VmRSS")


def _wait_healthy(system: LocalSystem, timeout: float = 600) -> dict[str, Any]:
    """``/healthz`` once it says every service is up (what ``LocalSystem.start`` waited for, checked again)."""
    deadline = time.monotonic() + timeout
    with system.client(timeout=10) as client:
        while True:
            try:
                health: dict[str, Any] = client.get("/healthz")
            except CliError:
                health = {}
            if health.get("status") == "ok" or time.monotonic() > deadline:
                return health
            time.sleep(0.1)


def _first_answer(system: LocalSystem, path: str, timeout: float = 600) -> float:
    """Seconds until ``GET path`` first answers (the service behind it has rebuilt what it serves)."""
    started = time.monotonic()
    with system.client(timeout=timeout) as client:
        while True:
            try:
                client.get(path)
                return time.monotonic() - started
            except CliError:
                if time.monotonic() - started > timeout:
                    return float("nan")
                time.sleep(0.1)


def start_up(data: Path, runs: int) -> dict[str, Any]:
    """``autarch up`` on ``data`` ``runs`` times: seconds to healthy, the lists' times, memory by process."""
    results: list[dict[str, Any]] = []
    # The data dir may have just been written (1.2 GB at the defaults): on the disk, not in the page cache's dirty
    # pages, before a start is timed.
    os.sync()
    for _ in range(runs):
        # No model is called: nothing in the data dir is left to run.
        system = LocalSystem(data, "http://127.0.0.1:9", extra_env={"AUTARCH_REQUEST_TIMEOUT": "120"})
        started = time.monotonic()
        system.start(timeout=600)
        health = _wait_healthy(system)
        healthy = time.monotonic() - started
        print(f"healthy in {healthy:.2f} s: {health}", flush=True)
        try:
            # /healthz answers once each service's endpoints answer $SRV.PING; what each serves is known once its
            # lists answer: the orchestrator's (workflows, loops) and the agent runner's (sessions).
            answered = {"workflows": _first_answer(system, "/api/workflows?limit=50"),
                        "loops": _first_answer(system, "/api/pulse?limit=50"),
                        "sessions": _first_answer(system, "/api/sessions?running=true")}
            ready = {name: round(healthy + sum(list(answered.values())[:i + 1]), 2)
                     for i, name in enumerate(answered)}
            print(f"lists first answered at {ready} s", flush=True)
            pids = processes(system)
            lists = {
                "workflows_default_page": timed_get(system, "/api/workflows"),
                "workflows_first_50": timed_get(system, "/api/workflows?limit=50"),
                "workflows_ui_newest": timed_ui_list(system, times=5),
                "loops_default_page": timed_get(system, "/api/pulse"),
                "loops_ui_1000": timed_get(system, "/api/pulse?limit=1000", times=3),
            }
            memory = {name: {"rss_mb": rss_mb(pid), "peak_mb": peak_rss_mb(pid)} for name, pid in pids.items()}
        finally:
            system.stop()
        results.append({"healthy_s": round(healthy, 2), "lists_answer_s": ready, "lists": lists, "memory": memory})
        print(f"  /api/workflows {lists['workflows_default_page']}; /api/pulse {lists['loops_default_page']}",
              flush=True)
    return {"runs": results, "healthy_s": [r["healthy_s"] for r in results],
            "ready_s": [max(r["lists_answer_s"].values()) for r in results]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument("--loops", type=int, default=1_000)
    parser.add_argument("--loop-iterations", type=int, default=10, help="iterations of each loop session")
    parser.add_argument("--runs", type=int, default=2, help="start-ups measured")
    parser.add_argument("--data", type=Path, help="a data dir this script built before (--keep): only start it")
    parser.add_argument("--keep", type=Path, help="keep the data dir built here")
    parser.add_argument("--templates", type=Path,
                        help="where the templates' data dir is kept (made there when missing, else reused)")
    args = parser.parse_args()
    figures: dict[str, Any] = {"workflows": args.workflows, "loops": args.loops,
                               "goal": {"healthy_s": GOAL_HEALTHY_S, "first_page_ms": GOAL_FIRST_PAGE_MS}}
    with tempfile.TemporaryDirectory(prefix="autarch-bench-startup-") as tmp_dir:
        tmp = Path(tmp_dir)
        data = args.data
        if data is None:
            data = tmp / "data"
            saved = args.templates / "ids.json" if args.templates is not None else None
            if saved is not None and saved.exists():
                shutil.copytree(args.templates / "data", data)
                workflow_id, loop_id = json.loads(saved.read_text())
            else:
                print("templates: one demo workflow and one loop session …", flush=True)
                started = time.monotonic()
                workflow_id, loop_id = make_templates(tmp, data, args.loop_iterations)
                figures["templates_s"] = round(time.monotonic() - started, 1)
                if saved is not None:
                    shutil.copytree(data, args.templates / "data", ignore=_RUN_FILES)
                    saved.write_text(json.dumps([workflow_id, loop_id]))
            print(f"copies: {args.workflows} workflows, {args.loops} loop sessions …", flush=True)
            started = time.monotonic()
            figures["stores"] = copy_units(data, {workflow_id: "workflow", loop_id: "loop"},
                                           {"workflow": args.workflows, "loop": args.loops})
            figures["copies_s"] = round(time.monotonic() - started, 1)
            print(f"  written in {figures['copies_s']} s: {figures['stores']}", flush=True)
            if args.keep is not None:
                shutil.copytree(data, args.keep, dirs_exist_ok=True, ignore=_RUN_FILES)
        figures["start_up"] = start_up(data, args.runs)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
