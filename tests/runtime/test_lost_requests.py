"""A request whose service instance died is noticed in seconds and sent again; a live, slow one is waited for.

Issue 12 ("No stall on a lost request"): a request in flight to an instance that was killed used to wait out its
whole timeout. Here the instances are real ``TypedService`` instances on their own connections to the real
nats-server (an instance "dies" by losing its connection mid-request, as a SIGKILLed process does), and real
git and tools service processes SIGKILLed mid-request and started again, as the supervisor would.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from nats.aio.client import Client as Nats

from autarch.cli.local.natsserver import EmbeddedNats, free_port
from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    CheckpointPulse,
    CreateWorkflowBranch,
    GetWorkflowBranch,
    PulseCheckpointed,
    RegisterRepository,
    StartPulse,
    WorkflowBranchView,
)
from autarch.contracts.tools import ListTools, ToolCall, ToolDefinitions, ToolResult
from autarch.runtime.bus import connect
from autarch.runtime.errors import RemoteError
from autarch.runtime.micro import TypedService
from autarch.runtime.requests import request
from autarch.services.git.engine import GitEngine
from autarch.services.orchestrator.workflow import controls
from autarch.services.orchestrator.workflow.outcomes import handle_turn
from autarch.services.scripted_model import ScriptedModelServer
from tests.git.gitcli import fsck, git, make_user_repo
from tests.orchestrator.test_workflow_steps import SETTINGS, next_step, pulse_running, turn
from tests.system import System
from tests.workflows.conftest import SERVICES, Client, demo_scenario, make_repo

SERVICE = "lost_test"
SUBJECT = subjects.request(SERVICE, "act")
TIMEOUT = 60.0
"""The requests' timeout: what a lost request used to wait out."""
PROMPT = 10.0
"""What "noticed within a couple of seconds, then answered by the new instance" must stay well under."""


class Act(msgspec.Struct, kw_only=True):
    key: str
    """The idempotency key: an effect is made once per key."""
    seconds: float = 0.0


class Acted(msgspec.Struct, kw_only=True):
    key: str
    effect: int
    """Which effect (its number) this key made, the first time."""


class Effects:
    """The service's durable state, shared by its instances (as a data dir is): one effect per key."""

    def __init__(self) -> None:
        self.made: dict[str, int] = {}
        self.received: list[tuple[str, str]] = []  # (instance, key): every request an instance got

    def make(self, key: str) -> Acted:
        if key not in self.made:
            self.made[key] = len(self.made) + 1
        return Acted(key=key, effect=self.made[key])


class Instance:
    """One instance of the test service on its own connection; ``die()`` drops the connection without answering."""

    def __init__(self, name: str, effects: Effects, *, effect_first: bool = False) -> None:
        self.name, self.effects, self.effect_first = name, effects, effect_first
        self.nc: Nats | None = None
        self.service: TypedService | None = None
        self.got = asyncio.Event()
        self.hang = False

    async def start(self, url: str) -> Instance:
        self.nc = await connect(url, name=f"instance-{self.name}")
        self.service = TypedService(self.nc, name=SERVICE)
        self.service.endpoint("act", Act, self._act)
        await self.service.start()
        await self.nc.flush()
        return self

    async def _act(self, command: Act) -> Acted:
        self.effects.received.append((self.name, command.key))
        if self.effect_first:
            self.effects.make(command.key)
        self.got.set()
        if self.hang:
            await asyncio.Event().wait()  # until it dies
        await asyncio.sleep(command.seconds)
        return self.effects.make(command.key)

    async def die(self) -> None:
        """Gone as a killed process is: its connection closes, its requests are never answered."""
        assert self.nc is not None
        await self.nc.close()

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
        if self.nc is not None and not self.nc.is_closed:
            await self.nc.close()


@pytest.fixture
async def instances(nats_server: EmbeddedNats) -> AsyncIterator[Callable[..., Awaitable[Instance]]]:
    started: list[Instance] = []

    async def start(name: str, effects: Effects, **options: Any) -> Instance:
        instance = await Instance(name, effects, **options).start(nats_server.url)
        started.append(instance)
        return instance

    yield start
    for instance in started:
        await instance.stop()


async def _dies_mid_request(instances, nc: Nats, *, effect_first: bool, restart_after: float) -> None:
    effects = Effects()
    first = await instances("first", effects, effect_first=effect_first)
    first.hang = True
    started = time.monotonic()
    pending = asyncio.create_task(request(nc, SUBJECT, Act(key="k1"), Acted, timeout=TIMEOUT,
                                          retry_unavailable=15.0, idempotent=True))
    await asyncio.wait_for(first.got.wait(), 5)
    await first.die()
    await asyncio.sleep(restart_after)  # the supervisor's restart takes a moment
    await instances("second", effects)
    reply = await asyncio.wait_for(pending, TIMEOUT)
    took = time.monotonic() - started
    print(f"instance died mid-request (effect {'made' if effect_first else 'not made'} before): answered after "
          f"{took:.1f}s by the new instance")
    assert took < PROMPT
    assert reply == Acted(key="k1", effect=1)
    assert effects.made == {"k1": 1}  # one effect, although two instances got the request
    assert effects.received == [("first", "k1"), ("second", "k1")]


async def test_a_request_whose_instance_dies_is_sent_again_to_the_restarted_service(instances, nc):
    await _dies_mid_request(instances, nc, effect_first=False, restart_after=1.5)


async def test_an_effect_made_before_the_instance_died_is_not_made_again(instances, nc):
    await _dies_mid_request(instances, nc, effect_first=True, restart_after=0.1)


async def test_a_live_slow_instance_is_waited_for_not_retried(instances, nc, caplog):
    effects = Effects()
    await instances("slow", effects)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="autarch.runtime"):
        reply = await request(nc, SUBJECT, Act(key="slow", seconds=3.0), Acted, timeout=TIMEOUT, idempotent=True)
    took = time.monotonic() - started
    assert reply == Acted(key="slow", effect=1) and 3.0 <= took < 4.0
    assert effects.received == [("slow", "slow")]  # asked about it several times, never sent twice
    assert not [r for r in caplog.records if "sending it again" in r.getMessage() or "any more" in r.getMessage()]


async def test_the_timeout_still_ends_a_live_instance_that_takes_too_long(instances, nc):
    effects = Effects()
    await instances("slower", effects)
    started = time.monotonic()
    with pytest.raises(RemoteError) as late:
        await request(nc, SUBJECT, Act(key="late", seconds=10.0), Acted, timeout=3.0, idempotent=True)
    assert late.value.code == ErrorCode.TIMEOUT and 3.0 <= time.monotonic() - started < 4.0
    assert effects.received == [("slower", "late")]


async def test_one_dead_instance_of_two_retries_only_its_own_request(instances, nc):
    effects = Effects()
    doomed = await instances("doomed", effects)
    await instances("live", effects)
    doomed.hang = True
    # The queue group picks the instance: send until each holds one request.
    tasks: dict[str, asyncio.Task[Acted]] = {}
    for n in range(40):
        key = f"k{n}"
        tasks[key] = asyncio.create_task(request(nc, SUBJECT, Act(key=key, seconds=4.0), Acted, timeout=TIMEOUT,
                                                 retry_unavailable=5.0, idempotent=True))
        await asyncio.sleep(0.02)
        holders = {name for name, _ in effects.received}
        if holders == {"doomed", "live"}:
            break
    assert {name for name, _ in effects.received} == {"doomed", "live"}
    doomed_keys = {k for name, k in effects.received if name == "doomed"}
    await doomed.die()
    started = time.monotonic()
    replies = await asyncio.wait_for(asyncio.gather(*tasks.values()), TIMEOUT)
    assert time.monotonic() - started < PROMPT
    assert {r.key for r in replies} == set(tasks)
    assert len(effects.made) == len(tasks)
    # Each request the dead instance held went to the live one once more; none of the live one's went twice.
    again = [k for name, k in effects.received if name == "live" and k in doomed_keys]
    assert sorted(again) == sorted(doomed_keys)
    live_keys = [k for name, k in effects.received if name == "live" and k not in doomed_keys]
    assert len(live_keys) == len(set(live_keys))


async def test_a_request_not_marked_idempotent_is_never_sent_twice(instances, nc):
    effects = Effects()
    first = await instances("only", effects)
    first.hang = True
    pending = asyncio.create_task(request(nc, SUBJECT, Act(key="once"), Acted, timeout=4.0, retry_unavailable=5.0))
    await asyncio.wait_for(first.got.wait(), 5)
    await first.die()
    await instances("next", effects)
    with pytest.raises(RemoteError) as late:
        await pending
    assert late.value.code == ErrorCode.TIMEOUT
    assert effects.received == [("only", "once")]


# --- real services, SIGKILLed -----------------------------------------------------------------------------------


class ServiceProcess:
    """``python -m autarch.services.<name>`` on the test nats-server, as the supervisor runs it."""

    def __init__(self, name: str, *, nats_url: str, data_dir: Path, log: Path, **env: str) -> None:
        environ = {k: v for k, v in os.environ.items() if not k.startswith("AUTARCH_")}
        environ.update(AUTARCH_NATS_URL=nats_url, AUTARCH_DATA_DIR=str(data_dir), AUTARCH_LOG_LEVEL="INFO", **env)
        with open(log, "ab") as out:
            self.process = subprocess.Popen([sys.executable, "-m", f"autarch.services.{name}"], env=environ,
                                            stdout=out, stderr=subprocess.STDOUT)

    async def exited(self, timeout: float = 30.0) -> int:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, "the service did not die"
            await asyncio.sleep(0.02)
        return self.process.returncode

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def test_git_killed_mid_commit_answers_from_the_restarted_service_with_one_commit(nc, nats_server, tmp_path):
    repo = make_user_repo(tmp_path / "project")
    data_dir = tmp_path / "data"
    engine = GitEngine(data_dir=data_dir)
    registered = engine.register_repository(RegisterRepository(path=str(repo)))
    view = engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch="autarch/wf-1"))
    engine.start_pulse(StartPulse(run_id="wf1", pulse_id="p1"))
    (Path(view.worktree_path) / "src/app.py").write_text("def main():\n    return 42\n")
    log = tmp_path / "git.log"
    # The fault hook kills the service right after it journaled the commit, before it moved any branch.
    crashing = ServiceProcess("git", nats_url=nats_server.url, data_dir=data_dir, log=log,
                              AUTARCH_GIT_CRASH_AFTER="commit")
    restarted: ServiceProcess | None = None
    try:
        await request(nc, subjects.request("git", "get_workflow_branch"), GetWorkflowBranch(run_id="wf1"),
                      WorkflowBranchView, retry_unavailable=30)  # up and serving
        started = time.monotonic()
        commit = asyncio.create_task(request(
            nc, subjects.request("git", "checkpoint_pulse"),
            CheckpointPulse(run_id="wf1", pulse_id="p1", summary="feat(app): answer 42"), PulseCheckpointed,
            timeout=TIMEOUT, retry_unavailable=15.0, idempotent=True))
        assert await crashing.exited() == -signal.SIGKILL
        restarted = ServiceProcess("git", nats_url=nats_server.url, data_dir=data_dir, log=log)
        done = await asyncio.wait_for(commit, TIMEOUT)
        took = time.monotonic() - started
        print(f"git killed mid-commit: the checkpoint answered after {took:.1f}s")
        assert took < PROMPT
    finally:
        crashing.stop()
        if restarted is not None:
            restarted.stop()
    assert git(repo, "rev-parse", "autarch/wf-1") == done.commit
    assert git(repo, "rev-list", "--count", f"{view.base_commit}..autarch/wf-1") == "1"  # one commit, not two
    assert git(repo, "log", "-1", "--format=%s", "autarch/wf-1") == "feat(app): answer 42"
    fsck(repo)


async def test_tools_killed_mid_shell_runs_the_call_again_and_answers_with_its_result(nc, nats_server, tmp_path):
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    data_dir = tmp_path / "data"
    log = tmp_path / "tools.log"
    tools = ServiceProcess("tools", nats_url=nats_server.url, data_dir=data_dir, log=log)
    restarted: ServiceProcess | None = None
    try:
        await request(nc, subjects.request("tools", "list_tools"), ListTools(role="pulsing"), ToolDefinitions,
                      retry_unavailable=30)
        call = ToolCall(session_id="s1", tool_call_id="toolu_1", role="pulsing", root=str(worktree), tool="shell",
                        arguments={"reason": "a check", "command": "echo started >> runs; sleep 2; echo done >> ends"})
        started = time.monotonic()
        pending = asyncio.create_task(request(nc, subjects.request("tools", "call"), call, ToolResult,
                                              timeout=TIMEOUT, retry_unavailable=15.0, idempotent=True))
        while not (worktree / "runs").exists():
            assert time.monotonic() - started < 20, log.read_text()
            await asyncio.sleep(0.02)
        tools.process.kill()  # mid-command: the command dies with it
        assert await tools.exited() == -signal.SIGKILL
        restarted = ServiceProcess("tools", nats_url=nats_server.url, data_dir=data_dir, log=log)
        result = await asyncio.wait_for(pending, TIMEOUT)
        took = time.monotonic() - started
        print(f"tools killed mid-shell: the call answered after {took:.1f}s (its 2 s command ran twice)")
        assert took < PROMPT
        assert not result.is_error and not result.replayed, result.content
        assert (worktree / "runs").read_text() == "started\nstarted\n"  # killed once, run again
        assert (worktree / "ends").read_text() == "done\n"  # finished once
        # A further repeat (a runner restarted after the result came) replays it.
        again = await request(nc, subjects.request("tools", "call"), call, ToolResult, idempotent=True)
        assert again.replayed and again.content == result.content
        assert (worktree / "runs").read_text() == "started\nstarted\n"
    finally:
        tools.stop()
        if restarted is not None:
            restarted.stop()


# --- whole workflows: a pulse's shell call whose tools service is lost ----------------------------------------

BRANCH = "autarch/demo"
FEAT = "feat(greeter): greet the world when the name is empty"
TEST = "test(greeter): cover the empty-name greeting"


def slow_shell_scenario() -> dict[str, Any]:
    """The demo, pulse-1's check sleeping two seconds first: long enough to lose the tools service under it."""
    s = copy.deepcopy(demo_scenario())
    shell = s["scripts"]["pulsing"][2]["content"][-1]
    assert shell["name"] == "shell"
    shell["input"]["command"] = "sleep 2; " + shell["input"]["command"]
    return s


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(slow_shell_scenario()) as server:
        yield server


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, model: ScriptedModelServer) -> Iterator[System]:
    data = tmp_path_factory.mktemp("lost") / "data"
    data.mkdir()
    env = {"AUTARCH_ANTHROPIC_BASE_URL": model.base_url, "AUTARCH_ANTHROPIC_API_KEY": "scripted",
           "AUTARCH_REQUEST_TIMEOUT": "5"}
    system = System(data_dir=data, port=free_port(), nats_port=free_port(), services=SERVICES, extra_env=env)
    system.start(timeout=60)
    yield system
    if system.proc is not None:
        system.stop()


class Events(threading.Thread):
    """Follows one workflow's SSE stream from its start (again after a broken connection), calling ``on_event``
    with each event and keeping each with the moment it came."""

    def __init__(self, system: System, workflow_id: str, on_event: Callable[[str, dict], None]) -> None:
        super().__init__(daemon=True)
        self.workflow_id, self.on_event = workflow_id, on_event
        self.seen: list[tuple[float, str, dict]] = []
        self._stop = threading.Event()
        self._http = httpx.Client(base_url=system.url, headers=system.headers, timeout=httpx.Timeout(5, read=30))

    def stop(self) -> None:
        self._stop.set()
        self._http.close()
        self.join(5)

    def run(self) -> None:
        last = "0"
        while not self._stop.is_set():
            try:
                params = {"workflow": self.workflow_id, "since": last, "deltas": "false"}
                with self._http.stream("GET", "/api/events", params=params) as reply:
                    fields: dict[str, str] = {}
                    for line in reply.iter_lines():
                        if line:
                            key, _, value = line.partition(":")
                            fields[key] = value.strip()
                            continue
                        if "event" in fields and "data" in fields:
                            data = json.loads(fields["data"])
                            self.seen.append((time.monotonic(), fields["event"], data))
                            last = fields.get("id", last)
                            self.on_event(fields["event"], data)
                        fields = {}
            except (httpx.HTTPError, RuntimeError, ValueError):
                pass
            if not self._stop.is_set():
                time.sleep(0.2)

    def names(self) -> list[str]:
        return [name for _, name, _ in self.seen]


class PulseShell:
    """Spots pulse-1's shell call on the event stream and does ``act`` to the tools service the moment it starts."""

    def __init__(self, system: System, act: Callable[[int], None]) -> None:
        self.system, self.act = system, act
        self.pulse_session: str | None = None
        self.tool_use_id: str | None = None
        self.pid = 0
        self.at = 0.0
        self.completed: dict | None = None
        self.completed_at = 0.0

    def __call__(self, name: str, data: dict) -> None:
        if name == "session:started" and data.get("role") == "pulsing" and self.pulse_session is None:
            self.pulse_session = data["session_id"]
        mine = self.pulse_session is not None and data.get("session_id") == self.pulse_session
        if mine and name == "turn:tool_started" and data["tool"] == "shell" and self.tool_use_id is None:
            self.tool_use_id, self.at = data["tool_use_id"], time.monotonic()
            self.pid = self.system.run_info()["children"]["tools"]
            self.act(self.pid)
        elif name == "turn:tool_completed" and data.get("tool_use_id") == self.tool_use_id and self.completed is None:
            self.completed, self.completed_at = data, time.monotonic()


def _drive(client: Client, wid: str, *, until: Callable[[dict], bool], timeout: float,
           on_halt: Callable[[dict], None] | None = None) -> dict:
    """Approve each card as it comes (and hand each halt to ``on_halt``) until ``until(view)``."""
    approved: set[tuple[str, int]] = set()
    halts: set[int] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        view = client.get(wid)
        if until(view):
            return view
        key = (view["stage"], len(view.get("artifact_stages", [])))
        if view["awaiting_approval"] and key not in approved and client.post(wid, "approve").status_code == 200:
            approved.add(key)
        if view["status"] == "halted" and on_halt is not None and view["version"] not in halts:
            halts.add(view["version"])
            on_halt(view)
        time.sleep(0.1)
    raise AssertionError(f"not there within {timeout:.0f}s: {json.dumps(client.get(wid), indent=1)}")


def _done(view: dict) -> bool:
    return view["status"] == "done" and view["worktree_path"] is None


def _results_sent(model: ScriptedModelServer, tool_use_id: str) -> list[dict]:
    """Every tool_result block for ``tool_use_id`` the model was sent, in any request."""
    found = []
    for recorded in model.requests:
        for message in (recorded.body or {}).get("messages", []):
            content = message.get("content")
            if isinstance(content, list):
                found += [b for b in content if b.get("type") == "tool_result" and b.get("tool_use_id") == tool_use_id]
    return found


@pytest.mark.slow
def test_tools_killed_mid_shell_the_workflow_goes_on_without_a_halt(system: System, model: ScriptedModelServer,
                                                                     tmp_path: Path) -> None:
    model.use(slow_shell_scenario())
    client = Client(system)
    repo = make_repo(tmp_path / "repo", demo_scenario()["files"])
    wid = client.create(repo, branch=BRANCH)
    shell = PulseShell(system, lambda pid: os.kill(pid, signal.SIGKILL))
    events = Events(system, wid, shell)
    events.start()
    try:
        _drive(client, wid, until=_done, timeout=120)
        runs = client.artifacts(wid)["pulse_runs"]
    finally:
        events.stop()
        client.http.close()
    assert shell.completed is not None, "pulse-1's shell call was never seen"
    assert system.run_info()["children"]["tools"] != shell.pid  # it was killed and restarted under the call
    stall = shell.completed_at - shell.at
    print(f"tools killed mid-shell: the shell call completed {stall:.1f}s after the kill (its command takes 2 s)")
    assert stall < PROMPT
    assert not shell.completed["is_error"], shell.completed
    # The model was never told of the crash: the one result it got for the call is the check's success.
    [result] = _results_sent(model, shell.tool_use_id or "")
    assert not result.get("is_error") and "ok" in json.dumps(result)
    assert "workflow:halted" not in events.names() and "workflow:error" not in events.names()
    assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "succeeded"), ("pulse-2", "succeeded")]
    assert git(repo, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [TEST, FEAT]


@pytest.mark.slow
def test_a_pulse_halted_by_a_lost_tool_call_is_recovered_by_resume(system: System, model: ScriptedModelServer,
                                                                     tmp_path: Path) -> None:
    """The halt a lost tool call used to cause: the tools service frozen (SIGSTOP) under pulse-1's shell call, so
    every sending of the call is lost; the model gets an error result, its ``complete_pulse`` is refused, and the
    scripted agent, off its script, fails: ``error``. Resume asks the same session, which fails the same way at
    once; the pulse then fails, and the next resume runs it as a new attempt that completes."""
    model.use(slow_shell_scenario())
    client = Client(system)
    repo = make_repo(tmp_path / "repo", demo_scenario()["files"])
    wid = client.create(repo, branch=BRANCH)
    shell = PulseShell(system, lambda pid: os.kill(pid, signal.SIGSTOP))
    halts: list[dict] = []

    def resume(view: dict) -> None:
        halts.append(view["halt"])
        if shell.pid:
            os.kill(shell.pid, signal.SIGCONT)
        reply = client.post(wid, "resume", {"message": "carry on"})
        assert reply.status_code == 200, reply.text

    events = Events(system, wid, shell)
    events.start()
    try:
        _drive(client, wid, until=_done, timeout=180, on_halt=resume)
        runs = client.artifacts(wid)["pulse_runs"]
    finally:
        if shell.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(shell.pid, signal.SIGCONT)
        events.stop()
        client.http.close()
    assert shell.completed is not None and shell.completed["is_error"]  # every sending was lost
    assert [h["reason"] for h in halts] == ["error", "pulse_failed"], halts
    assert "failed again after a resume" in halts[1]["message"]
    assert [(r["id"], r["status"]) for r in runs] == [("pulse-1", "failed"), ("pulse-1-a2", "succeeded"),
                                                      ("pulse-2", "succeeded")]
    assert git(repo, "log", "--format=%s", f"main..{BRANCH}").splitlines() == [TEST, FEAT]


async def test_a_pulse_agent_failing_again_right_after_a_resume_fails_the_pulse() -> None:
    wf, session_id = pulse_running()
    wf.session_closed(step="preflight", reason="preflight completed")
    handle_turn(wf, "pulse:pulse-1", turn(session_id, "error", detail="model API answered 400"), SETTINGS)
    assert wf.halt is not None and wf.halt.reason == "error"
    controls.resume(wf, None)  # the same session is asked again (an error is nearly always passing) ...
    [message] = wf.outbox
    wf.message_delivered(message_id=message.message_id)
    handle_turn(wf, "pulse:pulse-1", turn(session_id, "error", detail="model API answered 400"), SETTINGS)
    # ... and failing again at once, it cannot go on: the pulse fails, kept in a recovery commit.
    assert wf.halt is None and wf.run("pulse-1").ending == "failed"
    assert "failed again after a resume" in (wf.run("pulse-1").failure_reason or "")
    assert (await next_step(wf))[0] == "recover"
