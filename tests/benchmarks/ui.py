"""Web UI benchmark (a script, not a test). Its last line is a JSON object of the figures.

    python tests/benchmarks/ui.py [--events N] [--runs R]

Starts every service as a process (``autarch up``) with the scripted model and drives Debian's headless
Chromium (``AUTARCH_CHROMIUM`` for another) with Playwright, signed in through ``autarch ui``'s link:

- **open**: a workflow whose research agent made enough tool calls for the workflow to have at least N events
  (10,000 by default) waits at its research card; the time from navigating to its page until the card's
  Approve button is on screen (the page usable), over R loads: p50 and max. The page's HTML size too.
- **event → DOM**: a demo workflow run from start to finish (approved over the API) while its page is open;
  for every recorded event, the time from its ``occurred_at`` to the page having applied it to the DOM
  (``window.autarch.timings``, both wall clock on this machine): p50, p99, max.
"""

from __future__ import annotations

import argparse
import copy
import faulthandler
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx

from autarch.cli.demo_cmd import SERVICES, demo_scenario, make_sample_repo
from autarch.cli.local_system import LocalSystem
from autarch.services.scripted_model import ScriptedModelServer

CALLS_PER_REPLY = 100
"""Tool calls in one scripted model reply of the heavy research turn."""


def note(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def heavy_scenario(events: int) -> dict:
    """The demo, its research agent first reading a file in ``events`` tool calls (at least one event each: a
    read-only call records its completion; its start only when it is not run in parallel)."""
    s = copy.deepcopy(demo_scenario())
    replies = -(-events // CALLS_PER_REPLY)
    s["scripts"]["research"] = [
        {"content": [{"type": "tool_use", "name": "read_file",
                      "input": {"reason": f"Look again ({r}.{i})", "path": "greeter/core.py"}}
                     for i in range(CALLS_PER_REPLY)]}
        for r in range(replies)] + s["scripts"]["research"]
    return s


def login(system: LocalSystem, next_path: str = "/") -> str:
    out = subprocess.run([sys.executable, "-m", "autarch.cli.main", "ui", "--print", "--url", system.url],
                         env=system.env(), capture_output=True, text=True, check=True).stdout
    link = re.search(r"sign-in link[^:]*: (\S+)", out).group(1)
    return f"{link}&next={next_path}"


def wait(http: httpx.Client, wid: str, until, what: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = http.get(f"/api/workflows/{wid}").raise_for_status().json()
        if until(view):
            return view
        time.sleep(0.2)
    raise SystemExit(f"timed out waiting for {what}")


def count_events(http: httpx.Client, wid: str) -> int:
    """The workflow's recorded events: its stream from the start, read until the first keep-alive (all sent)."""
    count = 0
    params = {"since": "0", "deltas": "false", "workflow": wid}
    with http.stream("GET", "/api/events", params=params, timeout=60) as reply:
        for line in reply.iter_lines():
            if line.startswith(": keep-alive"):
                break
            count += line.startswith("id:")
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    faulthandler.dump_traceback_later(240, repeat=True)  # where it hangs, should it ever
    chromium = os.environ.get("AUTARCH_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="autarch-ui-bench-") as tmp_name, \
            ScriptedModelServer(heavy_scenario(args.events)) as model, sync_playwright() as pw:
        tmp = Path(tmp_name)
        replies = -(-args.events // CALLS_PER_REPLY)
        system = LocalSystem(tmp / "data", model.base_url, services=SERVICES,
                             extra_env={"AUTARCH_AGENT_MAX_STEPS": str(replies + 20)})
        system.start()
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            http = httpx.Client(base_url=system.url, headers={"Authorization": f"Bearer {system.token}"},
                                timeout=60, trust_env=False)
            # 1. A workflow of N events, waiting at its research card.
            repo = tmp / "heavy"
            make_sample_repo(repo, demo_scenario()["files"])
            wid = http.post("/api/workflows", json={"title": "Heavy", "request": "greet the world",
                                                    "repo": str(repo)}).raise_for_status().json()["id"]
            note("making the heavy workflow")
            wait(http, wid, lambda v: v["stage"] == "scoping" and v["awaiting_approval"], "scope")
            http.post(f"/api/workflows/{wid}/approve").raise_for_status()
            started = time.monotonic()
            wait(http, wid, lambda v: v["stage"] == "research" and v["awaiting_approval"], "research card")
            made = time.monotonic() - started
            note("counting its events")
            events = count_events(http, wid)
            sessions = http.get("/api/sessions", params={"workflow": wid}).json()["items"]
            calls = sum(len(t["tool_calls"]) for x in sessions
                        for t in http.get(f"/api/sessions/{x['session_id']}").json()["turns"])
            print(f"workflow with {events} events ({calls} tool calls) made in {made:.1f}s")

            # bypass_csp: the waits below are evaluated JavaScript, which the page's policy rightly refuses.
            context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
            page = context.new_page()
            page.on("pageerror", lambda exc: note(f"page error: {exc}"))
            page.set_default_timeout(120_000)
            page.goto(login(system, f"/workflows/{wid}"))
            opens, size = [], 0
            for _ in range(args.runs):
                began = time.perf_counter()
                reply = page.goto(f"{system.url}/workflows/{wid}")
                page.locator("#card-research").get_by_role("button", name="Approve").wait_for(state="visible")
                opens.append((time.perf_counter() - began) * 1000)
                note(f"load {len(opens)}: {opens[-1]:.0f} ms")
                size = len(reply.body())
            print(f"open: usable after {pct(opens, 50):.0f} ms p50, {max(opens):.0f} ms max "
                  f"({args.runs} loads, page {size / 1024:.0f} KiB)")

            # 2. Event → DOM while a demo workflow runs, its page open.
            model.use(demo_scenario())
            repo = tmp / "live"
            make_sample_repo(repo, demo_scenario()["files"])
            live = http.post("/api/workflows", json={"title": "Live", "request": "greet the world",
                                                     "repo": str(repo)}).raise_for_status().json()["id"]
            page.goto(f"{system.url}/workflows/{live}")
            page.wait_for_function("document.getElementById('live').textContent === 'live'")
            for stage in ("scoping", "research", "planning", "review"):
                wait(http, live, lambda v, s=stage: v["stage"] == s and v["awaiting_approval"], stage)
                http.post(f"/api/workflows/{live}/approve").raise_for_status()
            wait(http, live, lambda v: v["status"] == "done", "done")
            page.wait_for_function("document.querySelector('h1 .badge')?.textContent === 'done'")
            page.wait_for_timeout(500)
            timings = page.evaluate("window.autarch.timings")
            latencies = [shown - datetime.fromisoformat(at).timestamp() * 1000 for _, _, at, shown in timings]
            print(f"event → DOM: {len(latencies)} events, p50 {pct(latencies, 50):.0f} ms, "
                  f"p99 {pct(latencies, 99):.0f} ms, max {max(latencies):.0f} ms")
            context.close()
        finally:
            browser.close()
            system.stop()
    print(json.dumps({
        "events": events, "open_ms_p50": round(pct(opens, 50)), "open_ms_max": round(max(opens)),
        "page_kib": round(size / 1024), "event_to_dom_ms_p50": round(pct(latencies, 50)),
        "event_to_dom_ms_p99": round(pct(latencies, 99)), "event_to_dom_events": len(latencies),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
