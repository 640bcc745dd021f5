"""An epic kept between commands (``latest.py``): a command's copy (``Swarm.copy_for_change``) never changes the kept
epic, whatever the command records, and a chain of copies ends where the replay of their events on one epic ends."""

from __future__ import annotations

import pickle
from typing import Any

from autarch.services.orchestrator.swarm.model import Swarm

from .test_snapshots import state, swarm_history


def _steps() -> tuple[Swarm, list[Any]]:
    swarm, steps = swarm_history()
    # Beyond the history: a handed-off session, a delivered message, a reopen, a stop, released leases, a worker
    # waiting and retired, the epic finished.
    held: dict[str, Any] = {}
    more = [
        lambda s: held.update(b=s.claim("b", "w-one")),
        lambda s: s.begun(held["b"], "base1"),
        lambda s: s.reopen(held["b"], "merge conflict"),
        lambda s: held.update(c=s.claim("c", "w-one")),
        lambda s: s.begun(s.attempts[("c", 1)], "base2"),
        lambda s: s.leased(s.attempts[("c", 1)], ["c.py"]),
        lambda s: s.session_opened(s.attempts[("c", 1)], "turn-c"),
        # A scope granted (the lease's patterns and the request change) and one refused (the request changes).
        lambda s: s.request_scope("w-one", "r1", ["c2.py"], "c needs its helper"),
        lambda s: s.widen(s.attempts[("c", 1)], "r1", ["c2.py"]),
        lambda s: s.request_scope("w-one", "r2", ["x.py"], "and x"),
        lambda s: s.refuse_scope(s.attempts[("c", 1)], "r2", "held by another bead", ["w-two"]),
        lambda s: s.stop("the user stopped the swarm"),
    ]
    return swarm, [*steps, *more]


def test_a_commands_copy_leaves_the_kept_epic_as_it_was() -> None:
    kept, steps = _steps()
    kept.collect_events()
    for step in steps:
        copy = kept.copy_for_change()
        before = pickle.dumps(kept.__dict__)
        step(copy)
        assert pickle.dumps(kept.__dict__) == before, f"a step changed the kept epic: {step.__code__.co_names}"
        copy.collect_events()
        kept = copy


def test_a_commands_copy_shares_what_its_events_do_not_change() -> None:
    # Copying every bead and attempt for each command made a command cost more the more beads the epic had closed.
    kept, steps = _steps()
    for step in steps[:-1]:
        step(kept)
    kept.collect_events()
    copy = kept.copy_for_change()
    untouched = [key for key in kept.beads if key != "c"]
    assert untouched and all(copy.beads[key] is kept.beads[key] for key in untouched)
    assert all(copy.attempts[key] is kept.attempts[key] for key in kept.attempts)
    copy.stop("the user stopped the swarm")  # reopens c's attempt: only c and its attempt are copied
    assert copy.beads["c"] is not kept.beads["c"] and copy.beads["c"].status == "open"
    assert kept.beads["c"].status == "in_progress"
    assert all(copy.beads[key] is kept.beads[key] for key in untouched)
    assert copy.attempts[("c", 1)] is not kept.attempts[("c", 1)] and kept.attempts[("c", 1)].ended is None
    # The bookkeeping of what a copy owns is never part of a snapshot.
    from autarch.runtime.snapshots import encode_state
    from autarch.services.orchestrator.swarm.model import OWNED

    assert OWNED in vars(copy) and OWNED not in encode_state(copy)


def test_a_chain_of_copies_ends_as_the_replay_of_its_events_on_one_epic() -> None:
    swarm, steps = _steps()
    events = list(swarm.collect_events())
    for step in steps:
        swarm = swarm.copy_for_change()
        step(swarm)
        events += swarm.collect_events()
    replayed: Swarm | None = None
    for recorded in events:
        replayed = recorded.mutate(replayed)
    assert replayed is not None
    assert state(swarm) == state(replayed)
    assert swarm.merged == ["a"] and swarm.workers["w-one"].beads_closed == ["a"]
