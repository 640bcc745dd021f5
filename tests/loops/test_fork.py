"""Forking a loop session after one of its iterations (issue 36), through every service and the scripted model:
the fork's branch starts at that iteration's commit, its next iteration has that iteration's chained anchor, and
the original is never changed."""

from __future__ import annotations

import json
import uuid

import httpx

from autarch.contracts.loops import ForkLoop, ListLoops, LoopList

from ..workflows.conftest import git
from .conftest import FILES, iteration, write
from .test_anchors import first_session

HINT = ("feat(shop): add the payment page\n<signal>CONTINUE</signal>\n<anchor_hint><turn_id>{{recall:anchored on "
        "turn (\\S+) \\(}}</turn_id><reason>the payment design</reason></anchor_hint>")


def settled(loops, session_id: str):
    """The session once complete with its worktree removed: nothing more is recorded for it after that."""
    return loops.wait(session_id, lambda v: v.status == "complete" and v.worktree_path is None, "settled")


def http(loops) -> httpx.Client:
    return httpx.Client(base_url=loops.system.url, headers=loops.system.headers, timeout=30)


def test_a_session_forked_at_an_iteration_goes_on_from_its_commit_with_its_chained_anchor(model, loops):
    repo, earlier = first_session(model, loops, "forked")
    model.use({"files": FILES, "scripts": {
        "loop:fork-a.i1": iteration([write("pay.html", "<form>pay</form>\n")], HINT),
        "loop:fork-a.i2": iteration([write("original.txt", "2\n")], "feat(shop): the original's second\n"
                                    "<signal>COMPLETE</signal>"),
        "loop:fork-b.i2": iteration([write("fork.txt", "2\n")], "feat(shop): the fork's second\n"
                                    "<signal>COMPLETE</signal>"),
        "loop:fork-b.i3": iteration("Nothing left to do.\n<signal>COMPLETE</signal>"),
    }})
    anchor = loops.get(earlier.session_id).progress_log[0].turn_id
    original = settled(loops, loops.start(repo, "fork-a", goal="Design the payment flow", anchor_turn_id=anchor).id)
    one = original.iterations[0]
    assert one.commit_hash and one.anchor_hint_next == anchor
    head = git(repo, "rev-parse", original.branch_name).strip()

    with http(loops) as client:
        reply = client.post(f"/api/pulse/{original.id}/fork", json={"atIteration": 1, "script": "fork-b"})
    assert reply.status_code == 201, reply.text
    fork = reply.json()
    assert (fork["forked_from"], fork["forked_at_iteration"]) == (original.id, 1)
    assert fork["branch_name"] == f"autarch/loop-{fork['id'][:8]}"
    done = settled(loops, fork["id"])

    first, second = done.iterations
    assert (first.commit_hash, first.output_summary) == (one.commit_hash, one.output_summary)  # its history
    # Iteration 2 of the fork: anchored on iteration 1's hint (chained), on a branch cut at iteration 1's commit.
    assert (second.anchor_strategy, second.anchor_turn_id) == ("chained", anchor)
    assert second.commit_hash and git(repo, "rev-parse", f"{second.commit_hash}~1").strip() == one.commit_hash
    assert git(repo, "rev-parse", done.branch_name).strip() == second.commit_hash
    assert git(repo, "show", f"{done.branch_name}:fork.txt") == "2\n"
    assert "original.txt" not in git(repo, "ls-tree", "--name-only", done.branch_name)
    # The original is untouched.
    assert loops.get(original.id) == original
    assert git(repo, "rev-parse", original.branch_name).strip() == head

    # A fork of the fork, through the CLI: after its iteration 2, from its commit.
    cli = loops.system.cli("pulse", "fork", done.id, "--at-iteration", "2", "--json")
    assert cli.returncode == 0, cli.stderr
    again = json.loads(cli.stdout)
    assert (again["forked_from"], again["forked_at_iteration"]) == (done.id, 2)
    last = settled(loops, again["id"])
    assert [it.commit_hash for it in last.iterations[:2]] == [one.commit_hash, second.commit_hash]
    assert git(repo, "rev-parse", last.branch_name).strip() == second.commit_hash  # iteration 3 changed nothing
    assert loops.get(done.id) == done


def test_a_bad_fork_is_refused_with_a_typed_error_and_records_nothing(model, loops):
    model.use({"files": FILES, "scripts": {
        "loop:fork-bad.i1": iteration([write("a.txt", "1\n")], "feat(shop): a\n<signal>COMPLETE</signal>")}})
    session = settled(loops, loops.start(loops.repo("fork-bad"), "fork-bad").id)
    total = loops.ask("list_loops", ListLoops(), LoopList).total

    def fork(session_id: str, at: int) -> ForkLoop:
        return ForkLoop(session_id=str(uuid.uuid4()), forked_from=session_id, at_iteration=at)

    unknown = loops.ask_error("fork_loop", fork(str(uuid.uuid4()), 1))
    assert unknown.code == "not_found"
    past = loops.ask_error("fork_loop", fork(session.id, 2))
    assert past.code == "iteration_out_of_range" and past.reply.details == {"at_iteration": 2, "iterations_ended": 1}
    with http(loops) as client:
        assert client.post(f"/api/pulse/{uuid.uuid4()}/fork", json={"atIteration": 1}).status_code == 404
        reply = client.post(f"/api/pulse/{session.id}/fork", json={"atIteration": 5})
        assert reply.status_code == 400 and reply.json()["code"] == "iteration_out_of_range"
        for body in ({"atIteration": 0}, {}, {"atIteration": 1, "colour": "red"}):
            refused = client.post(f"/api/pulse/{session.id}/fork", json=body)
            assert refused.status_code == 400 and refused.json()["code"] == "bad_request", (body, refused.text)
    assert loops.ask("list_loops", ListLoops(), LoopList).total == total
    assert loops.get(session.id) == session
