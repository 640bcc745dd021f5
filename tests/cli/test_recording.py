"""What a recording's scripts are made of, what cannot be recorded, and how a replay's first difference is named."""

from __future__ import annotations

import re
from typing import Any

import pytest

from autarch.cli.gateway_client import CliError
from autarch.cli.recording import first_difference, recall_markers, scripts_of, session_events
from autarch.services.scripted_model.scenario import parse_scenario


def call(name: str, output: str | None, *, step: int = 0, tool_use_id: str = "toolu_1") -> dict[str, Any]:
    return {"tool_use_id": tool_use_id, "name": name, "input": {}, "step": step, "output": output,
            "is_error": False}


def session(sid: str = "s1", *, role: str = "research", script: str | None = None,
            replies: list[dict[str, Any]] | None = None, calls: list[dict[str, Any]] | None = None,
            root: str = "/run/a", compacted_through: int = -1, kickoff: str = "Look into it.") -> dict[str, Any]:
    replies = replies if replies is not None else [
        {"content": [{"type": "thinking", "thinking": "look first", "signature": "sig-of-the-real-model"},
                     {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}],
         "stop_reason": "tool_use"},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn"},
    ]
    turn = {"index": 0, "user_text": kickoff, "replies": replies,
            "tool_calls": calls if calls is not None else [call("read_file", "x")],
            "outcome": {"kind": "end_turn", "tool": None}}
    return {"session_id": sid, "role": role, "script": script, "root": root, "step": role,
            "compacted_through": compacted_through, "turns": [turn]}


def test_each_reply_becomes_a_step_under_the_key_the_session_asked_with() -> None:
    scripts = scripts_of([session(), session("s2", role="pulsing", script="pulse-1")])
    assert set(scripts) == {"research", "pulsing:pulse-1"}
    first, second = scripts["research"]
    # The recorded tool id and input are kept; the signature is the server's to make.
    assert first == {"content": [{"type": "thinking", "thinking": "look first"},
                                 {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}]}
    assert second == {"content": [{"type": "text", "text": "done"}]}
    parse_scenario({"scripts": {"research": scripts["research"]}})  # a valid scenario


@pytest.mark.parametrize(("bad", "why"), [
    (session(compacted_through=0), "its context was compacted"),
    (session(replies=[{"content": [{"type": "text", "text": "no"}], "stop_reason": "refusal"}]), "a refused reply"),
    (session(replies=[{"content": [{"type": "redacted_thinking", "data": "…"}], "stop_reason": "end_turn"}]),
     "'redacted_thinking' content block"),
])
def test_what_a_scenario_cannot_replay_is_refused_with_the_reason(bad: dict[str, Any], why: str) -> None:
    with pytest.raises(CliError, match=why):
        scripts_of([bad])


def test_two_sessions_asking_under_one_key_must_have_been_answered_alike() -> None:
    other = [{"content": [{"type": "text", "text": "something else"}], "stop_reason": "end_turn"}]
    with pytest.raises(CliError, match="both ask as 'research' and were answered differently at step 0"):
        scripts_of([session(), session("s2", replies=other)])
    # The same replies (a scripted original): one script, the longer of the two.
    shorter = session("s2", replies=session()["turns"][0]["replies"][:1])
    assert len(scripts_of([shorter, session()])["research"]) == 2


def run(output: str, *, root: str = "/run/a", events: list[str] | None = None,
        trees: list[str] | None = None) -> dict[str, Any]:
    s = session(root=root, calls=[call("read_file", output)])
    return {"repo": root, "sessions": [{"step": "research", "key": "research", "root": root,
                                        "events": session_events(s)}],
            "events": events or ["workflow:created", "workflow:completed"],
            "commits": [{"subject": "feat: x", "tree": t} for t in trees or ["a" * 40]]}


def test_a_replay_in_another_place_with_fresh_ids_and_timings_is_the_same_run() -> None:
    recorded = run("/run/a/x.py ok in 0.12s, comment 2af979f2-d437-4976-baa3-94555e76a480")
    replayed = run("/run/b/x.py ok in 3.4s, comment e2f2e548-bfa7-49c2-a395-bf7c73d93542", root="/run/b")
    assert first_difference(recorded, replayed) is None


def test_the_first_differing_event_is_named() -> None:
    recorded = run("def greet(): 'Greet someone'")
    assert first_difference(recorded, run("def greet(): 'Greet a person'")) == (
        'session research (research) event 2, turn 0: turn:tool_completed read_file (toolu_1): tool result '
        """differs: recorded "def greet(): 'Greet someone'", replayed "def greet(): 'Greet a person'\"""")
    assert first_difference(recorded, run("def greet(): 'Greet someone'", events=[
        "workflow:created", "workflow:abandoned"])) == "workflow event 2: recorded workflow:completed, replayed " \
        "workflow:abandoned"
    assert first_difference(recorded, run("def greet(): 'Greet someone'", trees=["b" * 40])) == (
        f"commit 1 (feat: x): recorded tree {'a' * 40}, replayed {'b' * 40} (feat: x)")


def test_an_id_the_run_gave_the_session_is_recalled_from_the_replay_s_own_first_message() -> None:
    epic, turn = "0b3c1e2a-5f7d-4c1b-9a8e-2d4f6a8c0e1f", "7e6d5c4b-3a29-4817-8f6e-5d4c3b2a1908"
    kickoff = (f"Work on bead base.\nPost on the topic `epic-{epic}` when done.\n"
               f"- iteration 1 (CONTINUE, commit 3fa9c2e71b, turn {turn}): the model")
    reply = {"content": [{"type": "text", "text": f"Building on turn {turn}."},
                         {"type": "tool_use", "id": "toolu_9", "name": "send_mail",
                          "input": {"topic": f"epic-{epic}", "to": ["all"]}}], "stop_reason": "tool_use"}
    [step] = scripts_of([session(replies=[reply], kickoff=kickoff)])["research"]
    markers = recall_markers(kickoff)
    assert step["content"][0]["text"] == f"Building on turn {markers[turn]}."
    assert step["content"][1]["input"] == {"topic": f"epic-{markers[epic]}", "to": ["all"]}
    # In a replay, each marker finds the replay's own id.
    fresh_epic, fresh_turn = "11111111-2222-4333-8444-555555555555", "66666666-7777-4888-8999-aaaaaaaaaaaa"
    replayed = kickoff.replace(epic, fresh_epic).replace(turn, fresh_turn).replace("3fa9c2e71b", "0c1d2e3f4a")
    for marker, fresh in ((markers[epic], fresh_epic), (markers[turn], fresh_turn)):
        pattern = marker.removeprefix("{{recall:").removesuffix("}}")
        assert re.search(pattern, replayed).group(1) == fresh


def test_a_worker_s_names_are_recalled_from_the_replay_s_own_kickoff_where_they_stand_alone() -> None:
    kickoff = ("## You are a swarm worker\nRuntime nickname: w1. Registered name: TealFox. Other workers work other "
               "beads.\nsend_message to the coordinator with the subject `[STARTUP] w1 / TealFox`")
    reply = {"content": [{"type": "text", "text": "w1 / TealFox here; w10 and TealFoxes are others."},
                         {"type": "tool_use", "id": "toolu_1", "name": "send_message",
                          "input": {"subject": "[STARTUP] w1 / TealFox"}}], "stop_reason": "tool_use"}
    [step] = scripts_of([session(role="pulsing", script="base", replies=[reply], kickoff=kickoff)])["pulsing:base"]
    nickname, name = r"{{recall:Runtime nickname: (\S+?)\.}}", r"{{recall:Registered name: (\S+?)\.}}"
    assert step["content"][0]["text"] == f"{nickname} / {name} here; w10 and TealFoxes are others."
    assert step["content"][1]["input"] == {"subject": f"[STARTUP] {nickname} / {name}"}
    # The replay's bead went to another worker: the markers find its names.
    replayed = kickoff.replace("w1", "w3").replace("TealFox", "GoldenPanda")
    assert re.search(r"Runtime nickname: (\S+?)\.", replayed).group(1) == "w3"
    assert re.search(r"Registered name: (\S+?)\.", replayed).group(1) == "GoldenPanda"


def epic_run(root: str, workers: dict[str, str], *, outputs: tuple[str, str], units: list[str] | None = None,
             changes: dict[str, str | None] | None = None, digest: str = "sha256:1") -> dict[str, Any]:
    """A swarm recording: one worker session (a mail tool, then a read), two beads, their commits."""
    s = session(role="pulsing", script="units", root=f"{root}/w",
                calls=[call("fetch_inbox", outputs[0], tool_use_id="t1"),
                       call("read_file", outputs[1], step=1, tool_use_id="t2")])
    bead_events = ["bead:claimed", "lease:granted", "bead:evidence", "bead:closed", "lease:released"]
    return {"kind": "swarm", "repo": root, "workers": workers, "events": ["swarm:started", "swarm:finished"],
            "sessions": [{"step": "bead units", "key": "pulsing:units", "root": f"{root}/w",
                          "events": session_events(s)}],
            "beads": [{"id": "base", "events": bead_events}, {"id": "units", "events": units or bead_events}],
            "commits": [{"bead": "base", "subject": "feat(base): add it", "changes": {"base.py": "1" * 40}},
                        {"bead": "units", "subject": "feat(units): add it",
                         "changes": changes or {"units.md": "2" * 40, "history/x/verification/units.md": None}}],
            "files_digest": digest}


def test_a_swarm_replay_is_compared_bead_by_bead_its_workers_names_and_the_epic_thread_set_aside() -> None:
    recorded = epic_run("/a", {"TealFox": "w1"}, outputs=('{"messages": ["m1 from w2"]}', "TealFox reads"))
    same = epic_run("/b", {"GoldenPanda": "w3"}, outputs=('{"messages": []}', "GoldenPanda reads"))
    assert first_difference(recorded, same) is None
    other_read = epic_run("/b", {"GoldenPanda": "w3"}, outputs=("{}", "GoldenPanda read another thing"))
    assert first_difference(recorded, other_read) == (
        "session bead units (pulsing:units) event 3, turn 0: turn:tool_completed read_file (t2): tool result "
        'differs: recorded "<worker> reads", replayed "<worker> read another thing"')

    def replay(**differing: Any) -> dict[str, Any]:
        return epic_run("/b", {"TealFox": "w1"}, outputs=("{}", "TealFox reads"), **differing)

    assert first_difference(recorded, replay(units=["bead:claimed", "bead:reopened"])) == (
        "bead units event 2: recorded lease:granted, replayed bead:reopened")
    assert first_difference(recorded, replay(changes={"units.md": "3" * 40})) == (
        f"bead units's commit (feat(units): add it): units.md differs: recorded {'2' * 40}, replayed {'3' * 40}")
    assert first_difference(recorded, replay(changes={"units.md": "2" * 40})) == (
        "bead units's commit (feat(units): add it): history/x/verification/units.md differs: recorded the evidence "
        "file, replayed not changed")
    assert first_difference(recorded, replay(digest="sha256:2")) == (
        "the branch's files differ (evidence files set aside): recorded sha256:1, replayed sha256:2")


def test_a_replay_that_halted_before_its_swarm_started_is_compared_too() -> None:
    recorded = epic_run("/a", {"TealFox": "w1"}, outputs=("{}", "TealFox reads"))
    halted = {**epic_run("/b", {"TealFox": "w1"}, outputs=("{}", "TealFox reads")), "kind": "workflow", "sessions": [],
              "events": ["workflow:created"], "commits": []}
    assert first_difference(recorded, halted) == "session bead units (pulsing:units): the replay has no such session"
    halted["sessions"] = recorded["sessions"]
    assert first_difference(recorded, halted) == "swarm event 1: recorded swarm:started, replayed workflow:created"
    halted["events"] = recorded["events"]
    assert first_difference(recorded, halted) == "the recording is of a swarm run, the replay ran as a workflow"
