"""Anchors resolved in seed 001's order — chained, explicit, semantic, temporal — from the turn memory (the
indexer), each recorded on its iteration; and the agent's own search of recorded turns (``search_history``)."""

from __future__ import annotations

from .conftest import FILES, iteration, write

PAYMENTS = ("feat(shop): design the payment flow\n\nStripe checkout sessions; a webhook confirms the charge "
            "before the order ships.\n<signal>COMPLETE</signal>")


def first_session(model, loops, name: str):
    """A completed one-iteration session on ``name``'s repository: its turn is in the turn memory."""
    model.use({"files": FILES, "scripts": {f"loop:{name}-a.i1": iteration([write("pay.md", "stripe\n")], PAYMENTS)}})
    repo = loops.repo(name)
    done = loops.wait_status(loops.start(repo, f"{name}-a", goal="Design the payment flow").id, "complete")
    return repo, done.iterations[0]


def test_explicit_then_chained(model, loops):
    repo, earlier = first_session(model, loops, "explicit")
    # Iteration 1 names the turn its context was anchored on (from its prompt) as the next iteration's anchor.
    hint = ("chore(shop): noted\n<signal>CONTINUE</signal>\n<anchor_hint><turn_id>{{recall:anchored on turn "
            "(\\S+) \\(}}</turn_id><reason>the payment design</reason></anchor_hint>")
    model.use({"files": FILES, "scripts": {
        "loop:explicit-b.i1": iteration([write("b1.txt", "1\n")], hint),
        "loop:explicit-b.i2": iteration([write("b2.txt", "2\n")], "chore(shop): b2\n<signal>COMPLETE</signal>"),
    }})
    started = loops.start(repo, "explicit-b", goal="Fix the header's CSS", anchor_turn_id=earlier.anchor_turn_id
                          or _turn_of(loops, earlier))
    view = loops.wait_status(started.id, "complete")
    one, two = view.iterations
    assert (one.anchor_strategy, one.anchor_turn_id) == ("explicit", started.anchor_turn_id)
    assert one.salience == 1.0 and one.anchor_resolution_ms is not None and one.anchor_resolution_ms >= 0
    assert one.slice_id and one.slice_turn_ids and one.node_count == len(one.slice_turn_ids)
    assert "design the payment flow" in one.task_content  # the slice went into the prompt (prefetch)
    # The hint comes first in the order: iteration 2 is anchored by it (chained), not by the session's anchor.
    assert one.anchor_hint_next == started.anchor_turn_id and one.anchor_hint_reason == "the payment design"
    assert (two.anchor_strategy, two.anchor_turn_id) == ("chained", started.anchor_turn_id)


def _turn_of(loops, it) -> str:
    view = loops.get(it.session_id)
    return view.progress_log[it.iteration_number - 1].turn_id


def test_semantic_when_a_recorded_turn_matches_the_goal_else_temporal(model, loops):
    repo, earlier = first_session(model, loops, "semantic")
    turn = _turn_of(loops, earlier)
    model.use({"files": FILES, "scripts": {
        "loop:semantic-b.i1": iteration("<signal>COMPLETE</signal>"),
        "loop:semantic-c.i1": iteration("<signal>COMPLETE</signal>"),
    }})
    related = loops.wait_status(loops.start(repo, "semantic-b", goal="Accept card payments at checkout").id,
                                "complete").iterations[0]
    assert (related.anchor_strategy, related.anchor_turn_id) == ("semantic", turn)
    assert related.salience is not None and 0.25 <= related.salience <= 1
    unrelated = loops.wait_status(loops.start(repo, "semantic-c", goal="Zzz qqq xyzzy").id,
                                  "complete").iterations[0]
    assert unrelated.anchor_strategy == "temporal" and unrelated.salience is None
    assert unrelated.anchor_turn_id is not None


def test_no_recorded_turn_no_anchor_and_context_none_resolves_nothing(model, loops):
    model.use({"files": FILES, "scripts": {"loop:fresh.i1": iteration("<signal>COMPLETE</signal>"),
                                           "loop:nocontext.i1": iteration("<signal>COMPLETE</signal>")}})
    fresh = loops.wait_status(loops.start(loops.repo("fresh"), "fresh").id, "complete").iterations[0]
    assert fresh.anchor_strategy == "none" and fresh.anchor_turn_id is None
    repo, _ = first_session(model, loops, "nocontext-repo")
    model.use({"files": FILES, "scripts": {"loop:nocontext.i1": iteration("<signal>COMPLETE</signal>")}})
    off = loops.wait_status(loops.start(repo, "nocontext", context_strategy="none",
                                        goal="Design the payment flow").id, "complete").iterations[0]
    assert off.anchor_strategy == "none" and "Context, anchored" not in off.task_content


def test_an_unknown_anchor_is_refused_at_start(loops):
    refused = loops.ask_raw_error("start_loop", {
        "session_id": "5b0e7a52-3c1d-4f7e-9a61-2d8c4b9e0f14", "project_name": "shop",
        "project_path": str(loops.repo("unknown")), "goal": "x", "anchor_turn_id": "no-such-turn"})
    assert refused.code == "unknown_anchor" and "no-such-turn" in refused.message


def test_the_agent_searches_recorded_turns_with_search_history(model, loops):
    repo, earlier = first_session(model, loops, "history")
    turn = _turn_of(loops, earlier)
    search = {"type": "tool_use", "name": "search_history",
              "input": {"reason": "Find how payments were designed", "query": "how do we confirm a charge"}}
    model.use({"files": FILES, "scripts": {
        "loop:history-b.i1": [{"content": [search]}, "Found it.\n<signal>COMPLETE</signal>"]}})
    started = loops.start(repo, "history-b", goal="Refund an order", context_strategy="mcp")
    view = loops.wait_status(started.id, "complete")
    assert "search_history" in view.iterations[0].task_content
    requests = [r for r in model.requests if r.key == "loop:history-b.i1" and r.step == 1]
    tool_result = requests[-1].body["messages"][-1]["content"][0]["content"]
    assert turn in str(tool_result) and "relevance" in str(tool_result)
