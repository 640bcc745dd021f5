"""Record → replay: a finished workflow (or a stopped loop session, or a finished swarm epic) as a scripted-model
scenario, and a replay checked against it.

``autarch workflow record ID`` reads, through the gateway, every session of the workflow with its model replies
whole (``GET /api/sessions/{id}?replies=true``) and writes a scenario whose scripts answer each session's
requests with those replies, in order: the key is the one the session asked the model under (``<role>`` or
``<role>:<script>``), the step the number of assistant messages before it, as the scripted model counts. The
scenario's ``files`` are the repository at the commit execution started from, and its ``recording`` holds what
the run did: that commit, the workflow's events in order, each session's events with every tool result, and
the branch's commits (subject and tree).

``autarch model serve-scripted run.json`` answers a new run from it with no key; ``autarch workflow compare
run.json ID`` checks that run against the recording and names the first event that differs. ``autarch pulse
record`` and ``compare`` do the same for a loop session, one script per iteration; ``autarch beads record`` and
``compare`` for a swarm epic, one script per bead attempt, compared bead by bead since its workers interleave
(:func:`_epic_run`, :func:`_epic_difference`).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .gateway_client import CliError, GatewayClient

__all__ = [
    "FILES_LIMIT",
    "LOOP_STOPPED",
    "commits_of",
    "document_of",
    "files_at",
    "first_difference",
    "load_recording",
    "loop_replay_of",
    "print_comparison",
    "recall_markers",
    "record_epic",
    "record_loop",
    "record_workflow",
    "replay_of",
    "scripts_of",
    "session_events",
    "stream_events",
]

FILES_LIMIT = 2_000_000
"""Bytes of starting files a recording carries at most; past it (or with a binary file) only the commit."""
FINISHED = ("done", "abandoned")
QUIET = 2.0
"""Seconds of silence that end the reading of a halted workflow's events (it has no last event)."""
_WORKFLOW_ENDS = {"done": "workflow:completed", "abandoned": "workflow:abandoned"}
_WORKFLOW_KINDS = ("workflow", "preflight", "pulse")
_EPIC_KINDS = ("swarm", "bead", "lease", "worker")
_LOOP_ENDS = {"complete": "loop:completed", "failed": "loop:failed", "aborted": "loop:aborted"}
LOOP_STOPPED = (*_LOOP_ENDS, "blocked", "paused")
"""Loop statuses with no turn running: a session in one of them can be recorded or compared."""
_DURATION = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s|sec|seconds)\b")
_FRESH_ID = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b|\b[0-9a-f]{40}\b")
"""Ids a run mints for itself (comment and session ids, UUIDs) and commit hashes (they cover the time)."""


# --- the scripts: every session's replies ----------------------------------------------------------------


def _key(session: Mapping[str, Any]) -> str:
    role, script = session["role"], session.get("script")
    return f"{role}:{script}" if script else role


def _block(block: Mapping[str, Any], where: str) -> dict[str, Any]:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "thinking":
        # The scripted model signs thinking itself; the recorded signature is the original model's.
        return {"type": "thinking", "thinking": block.get("thinking", "")}
    if kind == "tool_use":
        tool_input = block.get("input")
        call: dict[str, Any] = {"type": "tool_use", "id": block["id"], "name": block["name"]}
        if isinstance(tool_input, dict):
            call["input"] = tool_input
        else:
            call["raw_input"] = json.dumps(tool_input)  # what the model streamed was not a JSON object
        return call
    raise CliError(f"cannot record {where}: a {kind!r} content block has no scripted form")


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ID_PATTERN = "([0-9a-f-]{36})"
_HEX = re.compile(r"\b(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
_IDENTITY = re.compile(r"\b(Runtime nickname|Registered name): (\S+?)\.")
"""A swarm worker's identities in its kickoff: which worker takes which bead depends on who was free first."""


def recall_markers(kickoff: str) -> dict[str, str]:
    """Id → ``{{recall:…}}`` marker, for each UUID the run gave the session in its first message, and for a
    swarm worker's runtime nickname and registered name.

    A replay gives its session other ids (its epic, an earlier turn): a reply that quotes one recalls it from the
    replay's own first message, found by the words just before it on its line (a commit hash among them matching
    any). An id without such words, or whose words find another id first, is left as recorded. A worker's names
    are recalled by their labels (``Runtime nickname: w1.``): the replay's bead may go to another worker.
    """
    markers: dict[str, str] = {}
    for found in _IDENTITY.finditer(kickoff):
        label, value = found.groups()
        pattern = label + r": (\S+?)\."  # the labels are plain words
        first = re.search(pattern, kickoff)
        if first is not None and first.group(1) == value and value not in markers:
            markers[value] = "{{recall:" + pattern + "}}"
    for found in _UUID.finditer(kickoff):
        value = found.group(0)
        if value in markers:
            continue
        line = kickoff[: found.start()].rsplit("\n", 1)[-1]
        before = _UUID.split(line[-32:])[-1]
        if len(before.strip()) < 4:
            continue
        # A commit hash in those words differs in a replay too: any hex run matches there.
        pattern = "[0-9a-f]+".join(re.escape(part) for part in _HEX.split(before)) + _ID_PATTERN
        first = re.search(pattern, kickoff)
        if first is None or first.group(1) != value or "}}" in pattern:
            continue
        markers[value] = "{{recall:" + pattern + "}}"
    return markers


def _with_markers(value: Any, markers: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for found, marker in markers.items():
            if _UUID.fullmatch(found):
                value = value.replace(found, marker)
            else:  # a name (``w1``): only where it stands alone, not inside ``w10`` or another word
                value = re.sub(rf"(?<!\w){re.escape(found)}(?!\w)", marker.replace("\\", "\\\\"), value)
        return value
    if isinstance(value, dict):
        return {k: _with_markers(v, markers) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_markers(v, markers) for v in value]
    return value


def _steps(session: Mapping[str, Any]) -> list[dict[str, Any]]:
    if session.get("compacted_through", -1) >= 0:
        # A digest replaced earlier turns: later requests count fewer assistant messages than replies were given.
        raise CliError(f"cannot record session {session['session_id']}: its context was compacted, so its "
                       "requests no longer count one assistant message per reply")
    steps = []
    markers = recall_markers(session["turns"][0]["user_text"]) if session["turns"] else {}
    for turn in session["turns"]:
        for n, reply in enumerate(turn.get("replies") or []):
            where = f"session {session['session_id']} turn {turn['index']} reply {n}"
            if reply.get("stop_reason") == "refusal":
                raise CliError(f"cannot record {where}: a refused reply is left out of later requests, so the "
                               "next request would be answered with the refusal again")
            content = [_block(b, where) for b in reply["content"]] or [{"type": "text", "text": "(no content)"}]
            for block in content:
                # Text and tool inputs only: the scripted model fills markers in those, nowhere else.
                field = {"text": "text", "tool_use": "input"}.get(block["type"])
                if field in block:
                    block[field] = _with_markers(block[field], markers)
            step: dict[str, Any] = {"content": content}
            if reply.get("stop_reason") in ("max_tokens", "stop_sequence", "pause_turn"):
                step["stop_reason"] = reply["stop_reason"]
            if reply.get("usage"):
                # The original's token counts, not the server's estimates: the replay costs the same.
                step["usage"] = dict(reply["usage"])
            steps.append(step)
    return steps


def scripts_of(sessions: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The scenario's scripts: each session's replies under the key it asked the model with.

    Two sessions asking under one key are answered by one script (the scripted model tells sessions apart by
    role and script only), so their replies must agree step by step.

    Raises:
        CliError: a session cannot be replayed this way (compacted context, a refusal, two sessions with one
            key and different replies, an unknown block type).
    """
    scripts: dict[str, list[dict[str, Any]]] = {}
    owner: dict[str, str] = {}
    for session in sessions:
        key, steps = _key(session), _steps(session)
        if not steps:
            continue
        known = scripts.get(key)
        if known is None:
            scripts[key], owner[key] = steps, session["session_id"]
            continue
        shared = min(len(known), len(steps))
        if known[:shared] != steps[:shared]:
            at = next(i for i in range(shared) if known[i] != steps[i])
            raise CliError(f"cannot record: sessions {owner[key]} and {session['session_id']} both ask as "
                           f"{key!r} and were answered differently at step {at}")
        if len(steps) > len(known):
            scripts[key] = steps
    return scripts


# --- what the run did --------------------------------------------------------------------------------------


def session_events(session: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A session's events as a replay is compared on: each turn's start, its tool results in order, its end."""
    events: list[dict[str, Any]] = []
    for turn in session["turns"]:
        events.append({"type": "turn:started", "turn": turn["index"]})
        for call in sorted(turn["tool_calls"], key=lambda c: c["step"]):
            events.append({"type": "turn:tool_completed", "turn": turn["index"], "tool": call["name"],
                           "tool_use_id": call["tool_use_id"], "output": call.get("output"),
                           "is_error": bool(call.get("is_error"))})
        outcome = turn.get("outcome") or {}
        events.append({"type": "turn:completed", "turn": turn["index"], "outcome": outcome.get("kind"),
                       "tool": outcome.get("tool")})
    return events


def stream_events(client: GatewayClient, aggregate_id: str, kinds: tuple[str, ...], *,
                  end: str | None) -> list[dict[str, Any]]:
    """The events of ``kinds`` (``workflow``, ``preflight``, ``pulse``; ``loop``) a workflow or loop session
    recorded, in stream order, through its ``end`` event.

    A run without a last event (halted, blocked, paused: ``end`` None) is read until the stream stays silent
    for :data:`QUIET` seconds.
    """
    import httpx  # the gateway client's own dependency, loaded when a command talks to the gateway

    found: list[dict[str, Any]] = []
    try:
        with client.events(workflow=aggregate_id, since=0, deltas=False,
                           read_timeout=None if end else QUIET) as lines:
            name = None
            for line in lines:
                if line.startswith("event:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("data:") and name:
                    if name.split(":")[0] in kinds:
                        found.append({"type": name, **json.loads(line.split(":", 1)[1])})
                        if name == end:
                            return found
                    name = None
    except httpx.ReadTimeout:
        if end is None:
            return found
        raise CliError(f"the event stream of {aggregate_id} went silent before its {end} event") from None
    raise CliError(f"the event stream of {aggregate_id} ended before its {end} event")


def _git(repo: Path | str, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise CliError(f"git {' '.join(args)} failed in {repo}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode()


def commits_of(repo: Path | str, base: str, branch: str) -> list[dict[str, str]]:
    """The commits on ``branch`` after ``base``, oldest first: subject and tree (a tree's hash is its content)."""
    log = _git(repo, "log", "--reverse", "--format=%T %s", f"{base}..{branch}")
    return [{"tree": line[:40], "subject": line[41:]} for line in log.splitlines() if line]


def files_at(repo: Path | str, commit: str) -> dict[str, str] | None:
    """The repository's files at ``commit`` (path → text), or None when one is binary, a link or they are large."""
    listing = _git(repo, "ls-tree", "-r", "-z", commit)
    files: dict[str, str] = {}
    total = 0
    for entry in listing.split("\0"):
        if not entry:
            continue
        meta, path = entry.split("\t", 1)
        mode, kind, _ = meta.split()
        if kind != "blob" or mode not in ("100644", "100755"):
            return None
        raw = subprocess.run(["git", "-C", str(repo), "show", f"{commit}:{path}"], capture_output=True,
                             check=True).stdout
        total += len(raw)
        if total > FILES_LIMIT:
            return None
        try:
            files[path] = raw.decode()
        except UnicodeDecodeError:
            return None
    return files


SETTLE = 30.0
"""Seconds a session still running its turn is waited for before it is read as it is."""


def _session(client: GatewayClient, session_id: str, step: str) -> dict[str, Any]:
    """The session whole, once its turn has ended: a run's last event can come before its last session settles (the
    review's ``complete_review`` finishes the workflow while the runner is still recording that call's result), and
    a session read then would show the call without its result."""
    deadline = time.monotonic() + SETTLE
    while True:
        session = client.get(f"/api/sessions/{session_id}", replies="true")
        if session.get("status") != "running" or time.monotonic() >= deadline:
            return {**session, "step": step}
        time.sleep(0.05)


def _run(kind: str, run_id: str, *, repo: str, start_commit: str, branch: str | None, status: str,
         events: list[dict[str, Any]], sessions: list[dict[str, Any]], **about: Any) -> dict[str, Any]:
    commits = commits_of(repo, start_commit, branch) if branch else []
    return {
        "kind": kind, "id": run_id, **about, "repo": repo, "branch": branch, "start_commit": start_commit,
        "status": status, "events": [e["type"] for e in events], "commits": commits,
        "sessions": [{"step": s["step"], "key": _key(s), "session_id": s["session_id"], "root": s["root"],
                      "events": session_events(s)} for s in sessions],
        "_sessions": sessions,
    }


def _script_of(session: Mapping[str, Any] | None, suffix: str = "") -> str | None:
    # The selector the run was started with, as its sessions carry it (a loop iteration's adds ``.i<n>``).
    script = session.get("script") if session else None
    if script and suffix:
        return script.removesuffix(suffix).removesuffix(".") or None
    return script


def replay_of(client: GatewayClient, workflow_id: str, *, halted_too: bool = False,
              epic: bool = False) -> dict[str, Any]:
    """What a finished workflow did, as a recording holds it (also what ``compare`` reads of a replay, which
    may have halted where it diverged: ``halted_too``).

    A workflow whose execution ran as a swarm epic is recorded as one (kind ``swarm``, see :func:`_epic_run`);
    ``epic`` asks for that and refuses a workflow that ran none.
    """
    view = client.get(f"/api/workflows/{workflow_id}")
    allowed = (*FINISHED, "halted") if halted_too else FINISHED
    if view["status"] not in allowed:
        what = "epic" if epic else "workflow"
        raise CliError(f"{what} {workflow_id} is {view['status']} (stage {view['stage']}): only a finished "
                       f"{what} ({' or '.join(allowed)}) can be {'compared' if halted_too else 'recorded'}")
    events = stream_events(client, workflow_id, (*_WORKFLOW_KINDS, *_EPIC_KINDS),
                           end=_WORKFLOW_ENDS.get(view["status"]))
    swarm = next((e for e in events if e["type"] == "swarm:started"), None)
    if epic and swarm is None:
        raise CliError(f"workflow {workflow_id} ran no swarm epic (its plan is not a bead plan, or execution never "
                       "started): record it with `autarch workflow record`")
    started = next((e for e in events if e["type"] == "preflight:started"), None)
    start_commit = started["base_commit"] if started else _git(view["repo"], "rev-parse", view["base_branch"]).strip()
    sessions = [_session(client, sid, step) for step, sid in view["sessions"].items()]
    about = {"title": view["title"], "request": view["request"], "base_branch": view["base_branch"],
             "script": _script_of(next((s for s in sessions if s["step"] == "scoping"), None))}
    if swarm is not None:
        return _epic_run(client, view, start_commit, events, sessions, max_workers=swarm["max_workers"], **about)
    return _run("workflow", workflow_id, repo=view["repo"], start_commit=start_commit, branch=view.get("branch"),
                status=view["status"], events=[e for e in events if e["type"].split(":")[0] in _WORKFLOW_KINDS],
                sessions=sessions, **about)


def _bead_of(event: Mapping[str, Any]) -> str | None:
    # Most bead events name it; bead:created and bead:updated carry the bead itself.
    bead = event.get("bead")
    found = event.get("bead_id") or (bead.get("id") if isinstance(bead, dict) else None)
    return found if isinstance(found, str) else None


def _epic_run(client: GatewayClient, view: Mapping[str, Any], start_commit: str, events: list[dict[str, Any]],
              sessions: list[dict[str, Any]], **about: Any) -> dict[str, Any]:
    """A swarm epic's recording: the workflow's, plus every worker session, each bead's events and commit.

    Workers run side by side, so what depends on which of them was free first is kept apart from what must be
    the same: the workflow's own events and ``swarm:*`` (not ``worker:*``, whose waits follow the interleaving);
    each bead's events in order (``bead:*``, ``lease:*``); each bead's commit as its subject and its changes
    (path → blob) rather than the branch's order of commits; and the branch's final files. A bead's
    verification evidence file records when it ran and which worker ran it, so only its path is kept.
    """
    wid, repo = view["id"], view["repo"]
    stage_ids = {s["session_id"] for s in sessions}
    listed = client.get("/api/sessions", run=wid)["items"]
    # A worker session asks as ``pulsing:<bead>`` (``-a<n>`` for a later attempt, ``-h<n>`` after a handoff):
    # one script per bead attempt, whichever worker ran it.
    workers = [_session(client, s["session_id"], "") for s in listed
               if s["role"] == "pulsing" and s["session_id"] not in stage_ids]
    for worker in workers:
        worker["step"] = f"bead {worker.get('script') or worker['session_id']}"
    workers.sort(key=lambda w: str(w["step"]))
    beads = sorted(client.get("/api/beads", epic_id=wid)["beads"], key=lambda b: str(b["id"]))
    evidence = {b["id"]: b["verification_evidence"] for b in beads if b.get("verification_evidence")}
    run = _run("swarm", wid, repo=repo, start_commit=start_commit, branch=None, status=view["status"],
               events=[e for e in events if e["type"].split(":")[0] in (*_WORKFLOW_KINDS, "swarm")],
               sessions=[*sessions, *workers], **about)
    branch = view.get("branch")
    run["branch"] = branch
    run["workers"] = {e["worker"]: e["nickname"] for e in events if e["type"] == "worker:joined"}
    run["beads"] = [{"id": b["id"], "title": b["title"], "status": b["status"], "files": b["files"],
                     "verify": b["verify"], "depends_on": [d["bead_id"] for d in b.get("dependencies", [])],
                     "events": [e["type"] for e in events if _bead_of(e) == b["id"]]} for b in beads]
    run["commits"] = [_bead_commit(repo, b["id"], b["commit"], evidence.get(b["id"])) for b in beads
                      if b.get("commit")]
    run["files_digest"] = _files_digest(repo, branch, set(evidence.values())) if branch else None
    return run


def _bead_commit(repo: str, bead_id: str, commit: str, evidence: str | None) -> dict[str, Any]:
    """A bead's commit as the replay is compared on: its subject and what it changed, the evidence file apart."""
    subject = _git(repo, "log", "-1", "--format=%s", commit).strip()
    changes: dict[str, str | None] = {}
    for line in _git(repo, "diff-tree", "-r", "--no-commit-id", "--no-renames", commit).splitlines():
        meta, path = line.split("\t", 1)
        blob = meta.split()[3]
        changes[path] = None if path == evidence else ("deleted" if set(blob) == {"0"} else blob)
    return {"bead": bead_id, "subject": subject, "changes": changes, "evidence": evidence}


def _files_digest(repo: str, branch: str, set_aside: set[str]) -> str:
    """A digest of every file on ``branch`` (mode, path, blob) but those ``set_aside`` (the evidence files)."""
    listing = [line for line in _git(repo, "ls-tree", "-r", branch).splitlines()
               if line.split("\t", 1)[1] not in set_aside]
    return "sha256:" + hashlib.sha256("\n".join(listing).encode()).hexdigest()


def loop_replay_of(client: GatewayClient, loop_id: str) -> dict[str, Any]:
    """What a loop session that stopped (complete, failed, aborted, blocked or paused) did, as recorded."""
    view = client.get(f"/api/pulse/{loop_id}", iterations_from=1, iterations_limit=1000)
    if view["status"] not in LOOP_STOPPED:
        raise CliError(f"loop session {loop_id} is {view['status']}: only a stopped session "
                       f"({', '.join(LOOP_STOPPED)}) can be recorded or compared")
    if view["iterations_total"] > len(view["iterations"]):
        raise CliError(f"loop session {loop_id} has {view['iterations_total']} iterations; a recording holds "
                       f"{len(view['iterations'])} at most")
    if not view.get("base_commit"):
        raise CliError(f"loop session {loop_id} has no branch: nothing ran")
    events = stream_events(client, loop_id, ("loop",), end=_LOOP_ENDS.get(view["status"]))
    sessions = [_session(client, it["agent_session_id"], f"iteration {it['iteration_number']}")
                for it in view["iterations"] if it.get("agent_session_id")]
    first = sessions[0] if sessions else None
    return _run("loop", loop_id, repo=view["project_path"], start_commit=view["base_commit"],
                branch=view["branch_name"], status=view["status"], events=events, sessions=sessions,
                goal=view["goal"], max_iterations=view["max_iterations"],
                context_strategy=view["context_strategy"], script=_script_of(first, suffix="i1"))


def document_of(recording: dict[str, Any], description: str) -> dict[str, Any]:
    """The scenario document of a run read by :func:`replay_of` or :func:`loop_replay_of`.

    Raises:
        CliError: no model replies, or a session cannot be replayed (see :func:`scripts_of`).
    """
    sessions = recording.pop("_sessions")
    scripts = scripts_of(sessions)
    if not scripts:
        raise CliError(f"{recording['kind']} {recording['id']} has no model replies to record")
    files = files_at(recording["repo"], recording["start_commit"])
    document: dict[str, Any] = {
        "description": f"{description}: replay it on the files below (or commit {recording['start_commit']})",
        "scripts": scripts,
        "recording": recording,
    }
    if files is not None:
        document["files"] = files
    return document


def _workflow_description(recording: Mapping[str, Any]) -> str:
    if recording["kind"] == "swarm":
        return (f"recorded from swarm epic {recording['id']} ({recording['title']}), with the same request, the "
                f"same answers to its cards and {recording['max_workers']} workers (setting swarm_workers)")
    return (f"recorded from workflow {recording['id']} ({recording['title']}), with the same request and the same "
            "answers to its cards")


def record_workflow(client: GatewayClient, workflow_id: str) -> dict[str, Any]:
    """The scenario document replaying a finished workflow's model replies, with its recording (a swarm epic's
    when its execution ran as one: see :func:`record_epic`).

    Raises:
        CliError: the workflow is not finished, or a session cannot be replayed (see :func:`scripts_of`).
    """
    recording = replay_of(client, workflow_id)
    return document_of(recording, _workflow_description(recording))


def record_epic(client: GatewayClient, epic_id: str) -> dict[str, Any]:
    """The scenario document replaying a finished swarm epic: its workflow's sessions and every worker's, one
    script per bead attempt (``pulsing:<bead>``), with its recording.

    Raises:
        CliError: the epic's workflow is not finished or ran no swarm, or a session cannot be replayed (see
            :func:`scripts_of`).
    """
    recording = replay_of(client, epic_id, epic=True)
    return document_of(recording, _workflow_description(recording))


def record_loop(client: GatewayClient, loop_id: str) -> dict[str, Any]:
    """The scenario document replaying a stopped loop session's iterations, with its recording.

    Raises:
        CliError: the session still runs, or an iteration cannot be replayed (see :func:`scripts_of`).
    """
    recording = loop_replay_of(client, loop_id)
    return document_of(recording, f"recorded from loop session {loop_id}, with the same goal and script")


def load_recording(path: str, kind: str, *also: str) -> dict[str, Any]:
    """The ``recording`` of a file ``record`` wrote, of a ``kind`` run (or of one of the kinds ``also``).

    Raises:
        CliError: (exit code 2) the file is unreadable or holds no such recording.
    """
    try:
        recording = json.loads(Path(path).read_text()).get("recording")
    except (OSError, ValueError, AttributeError) as exc:
        raise CliError(f"cannot read the recording {path!r}: {exc}", exit_code=2) from None
    if not isinstance(recording, dict) or recording.get("kind") not in (kind, *also):
        command = {"loop": "pulse", "swarm": "beads"}.get(kind, kind)
        raise CliError(f"{path} holds no {kind} recording (write one with `autarch {command} record`)",
                       exit_code=2)
    return recording


def print_comparison(recording: Mapping[str, Any], replay: dict[str, Any], *, as_json: bool) -> int:
    """Print how ``replay`` compares with ``recording``; 0 when it is the same run, else 1."""
    replay.pop("_sessions", None)
    difference = first_difference(recording, replay)
    if as_json:
        print(json.dumps({"same": difference is None, "first_difference": difference}, indent=2))
    elif difference is None:
        commits = (f"{len(recording['beads'])} beads' events, {len(recording['commits'])} bead commits and the "
                   "branch's files" if recording["kind"] == "swarm" else f"{len(recording['commits'])} commit trees")
        print(f"same run: {sum(len(s['events']) for s in recording['sessions'])} session events, "
              f"{len(recording['events'])} {recording['kind']} events and {commits} match")
    else:
        print(f"diverged: {difference}")
    return 0 if difference is None else 1


# --- comparing a replay ---------------------------------------------------------------------------------


_MAIL_TOOLS = frozenset({"send_message", "reply_message", "fetch_inbox", "fetch_topic"})
"""Tools on the epic thread: what they answer (message numbers, what others posted so far) follows the order in
which a swarm's workers ran, so in a swarm only their names and error flags are compared."""
_TIME = re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
_BLOBS = re.compile(r"index [0-9a-f]{7,40}\.\.[0-9a-f]{7,40}\b")
"""A diff's blob line; no word boundary before it: in a JSON result it follows an escaped newline (``\\n``)."""


class _Side(NamedTuple):
    """What one run calls its own: its repository and worktrees, and its swarm workers' names."""

    paths: list[str]
    names: list[str]


def _side(run: Mapping[str, Any]) -> _Side:
    workers = run.get("workers") or {}
    return _Side([run["repo"], *(s["root"] for s in run["sessions"])], [*workers, *workers.values()])


def _normalize(text: Any, side: _Side) -> Any:
    # A replay runs in another repository and worktree, its commands take their own time, it mints its own ids; a
    # swarm's replay names its workers anew, and the diff of a file holding a time has other blobs.
    if not isinstance(text, str):
        return text
    for path in sorted({p for p in side.paths if p}, key=len, reverse=True):
        text = text.replace(path, "<root>")
    for name in sorted({n for n in side.names if n}, key=len, reverse=True):
        text = re.sub(rf"(?<!\w){re.escape(name)}(?!\w)", "<worker>", text)
    text = _BLOBS.sub("index <blobs>", _TIME.sub("<time>", text))
    return _FRESH_ID.sub("<id>", _DURATION.sub("<duration>", text))


def _clip(value: Any, limit: int = 160) -> str:
    shown = json.dumps(value, ensure_ascii=False)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"


def _differs(want: Mapping[str, Any], got: Mapping[str, Any], sides: tuple[_Side, _Side], *, swarm: bool) -> str:
    for field in ("type", "tool", "is_error", "outcome"):
        if want.get(field) != got.get(field):
            return f"{field} differs: recorded {_clip(want.get(field))}, replayed {_clip(got.get(field))}"
    if swarm and want.get("tool") in _MAIL_TOOLS:
        return ""
    recorded, replayed = _normalize(want.get("output"), sides[0]), _normalize(got.get("output"), sides[1])
    if recorded != replayed:
        if isinstance(recorded, str) and isinstance(replayed, str):
            # Shown from a little before where they part: a long result may differ only far into it.
            at = next((i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b),
                      min(len(recorded), len(replayed)))
            start = max(0, at - 60)
            recorded, replayed = (("…" if start else "") + text[start:] for text in (recorded, replayed))
        return f"tool result differs: recorded {_clip(recorded)}, replayed {_clip(replayed)}"
    return ""


def _describe(event: Mapping[str, Any]) -> str:
    if event["type"] == "turn:tool_completed":
        return f"turn {event['turn']}: turn:tool_completed {event['tool']} ({event['tool_use_id']})"
    if event["type"].startswith("turn:"):
        return f"turn {event['turn']}: {event['type']}"
    return event["type"]


def first_difference(recording: Mapping[str, Any], replay: Mapping[str, Any]) -> str | None:
    """The first event where ``replay`` is not what ``recording`` did, described; None when it is the same run.

    Sessions are compared in the order the workflow opened them, each event by event (tool results with the
    run's own repository and worktree paths, durations, times, minted ids and commit hashes set aside), then the
    workflow's own events one by one, then the branch's commits tree by tree. A swarm epic's worker sessions
    follow, one per bead attempt (their workers' names set aside too); then each bead's events in order, each
    bead's commit and the branch's files (:func:`_epic_difference`).
    """
    kind = recording.get("kind", "workflow")
    replayed = {s["step"]: s for s in replay["sessions"]}
    sides = (_side(recording), _side(replay))
    for session in recording["sessions"]:
        other = replayed.get(session["step"])
        if other is None:
            return f"session {session['step']} ({session['key']}): the replay has no such session"
        want, got = session["events"], other["events"]
        for n, event in enumerate(want):
            where = f"session {session['step']} ({session['key']}) event {n + 1}"
            if n >= len(got):
                return f"{where}, {_describe(event)}: missing from the replay"
            if why := _differs(event, got[n], sides, swarm=kind == "swarm"):
                return f"{where}, {_describe(event)}: {why}"
        if len(got) > len(want):
            return (f"session {session['step']} ({session['key']}) event {len(want) + 1}, "
                    f"{_describe(got[len(want)])}: not in the recording")
    for n, (want_type, got_type) in enumerate(zip(recording["events"], replay["events"], strict=False)):
        if want_type != got_type:
            return f"{kind} event {n + 1}: recorded {want_type}, replayed {got_type}"
    if len(recording["events"]) != len(replay["events"]):
        n = min(len(recording["events"]), len(replay["events"]))
        longer = recording["events"] if len(recording["events"]) > n else replay["events"]
        side = "missing from the replay" if longer is recording["events"] else "not in the recording"
        return f"{kind} event {n + 1}, {longer[n]}: {side}"
    if replay.get("kind", "workflow") != kind:  # a replay that halted before its swarm started, or the reverse
        return f"the recording is of a {kind} run, the replay ran as a {replay.get('kind', 'workflow')}"
    if kind == "swarm":
        return _epic_difference(recording, replay)
    for n, (want_commit, got_commit) in enumerate(zip(recording["commits"], replay["commits"], strict=False)):
        if want_commit != got_commit:
            return (f"commit {n + 1} ({want_commit['subject']}): recorded tree {want_commit['tree']}, replayed "
                    f"{got_commit['tree']} ({got_commit['subject']})")
    if len(recording["commits"]) != len(replay["commits"]):
        return f"the branch has {len(replay['commits'])} commits, the recording {len(recording['commits'])}"
    return None


def _change(changes: Mapping[str, str | None], path: str) -> str:
    if path not in changes:
        return "not changed"
    return changes[path] or "the evidence file"


def _epic_difference(recording: Mapping[str, Any], replay: Mapping[str, Any]) -> str | None:
    """A swarm epic's part: each bead's events one by one (beads by id: workers interleave, a bead's own events do
    not), then each bead's commit (subject, and what it changed but its evidence file), then the branch's files."""
    replayed = {b["id"]: b for b in replay.get("beads", [])}
    for bead in recording["beads"]:
        other = replayed.get(bead["id"])
        if other is None:
            return f"bead {bead['id']}: the replay has no such bead"
        for n, want in enumerate(bead["events"]):
            got = other["events"][n] if n < len(other["events"]) else None
            if got is None:
                return f"bead {bead['id']} event {n + 1}, {want}: missing from the replay"
            if want != got:
                return f"bead {bead['id']} event {n + 1}: recorded {want}, replayed {got}"
        if len(other["events"]) > len(bead["events"]):
            return f"bead {bead['id']} event {len(bead['events']) + 1}, {other['events'][len(bead['events'])]}: " \
                   "not in the recording"
    extra = sorted(set(replayed) - {b["id"] for b in recording["beads"]})
    if extra:
        return f"bead {extra[0]}: not in the recording"
    commits = {c["bead"]: c for c in replay["commits"]}
    for commit in recording["commits"]:
        got = commits.get(commit["bead"])
        where = f"bead {commit['bead']}'s commit ({commit['subject']})"
        if got is None:
            return f"{where}: the replay did not land it"
        if got["subject"] != commit["subject"]:
            return f"{where}: replayed with the subject {got['subject']!r}"
        want_changes, got_changes = commit["changes"], got["changes"]
        if got_changes != want_changes:
            # The files the bead changed first, its evidence file (content set aside: None) last.
            paths = sorted(set(want_changes) | set(got_changes),
                           key=lambda p: (want_changes.get(p, "") is None or got_changes.get(p, "") is None, p))
            path = next(p for p in paths if want_changes.get(p, "absent") != got_changes.get(p, "absent"))
            return (f"{where}: {path} differs: recorded {_change(want_changes, path)}, replayed "
                    f"{_change(got_changes, path)}")
    if len(replay["commits"]) != len(recording["commits"]):
        return f"the replay landed {len(replay['commits'])} bead commits, the recording {len(recording['commits'])}"
    if recording.get("files_digest") != replay.get("files_digest"):
        return (f"the branch's files differ (evidence files set aside): recorded {recording.get('files_digest')}, "
                f"replayed {replay.get('files_digest')}")
    return None
