"""Property: however workers race, crash and let leases lapse, no two holders ever hold conflicting files at once.

Each worker is an asyncio task with its own connection and :class:`LeaseTable`, running a random program of
acquire / renew / release / sleep / crash (stop: its leases lapse by themselves) against one scope with a
short ttl. From what the table answered (grant times, renewal and release times, all table times) every
worker keeps the validity windows of its leases; afterwards no two windows of different holders over
overlapping patterns may overlap in time unless both leases are shared, and every refusal must name a
lease some worker really was granted, with the expiry the table gave it.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.contracts.beads import LeaseMode
from autarch.runtime.bus import connect
from autarch.runtime.leases import LeaseGrant, LeaseRefusal, LeaseTable, patterns_overlap

TTL = 0.15
PATTERNS = ["src/a.py", "src/b.py", "src/*.py", "src/**", "src", "docs/x.md", "*.md", "docs/*", "{src,docs}/a.*"]


@dataclass
class Window:
    holder: str
    pattern: str
    mode: LeaseMode
    start: float
    end: float
    expiries: list[float] = field(default_factory=list)
    """Every expiry the table gave this lease (grant, renewals): a refusal must quote one of them."""


@dataclass
class Log:
    windows: list[Window] = field(default_factory=list)
    refusals: list[LeaseRefusal] = field(default_factory=list)


_acquire = st.tuples(
    st.just("acquire"), st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3, unique=True),
    st.sampled_from(["exclusive", "exclusive", "shared"]),
)
_release = st.tuples(st.just("release"), st.none() | st.lists(st.sampled_from(PATTERNS), max_size=2, unique=True))
_op = st.one_of(
    _acquire,
    _acquire,
    st.tuples(st.just("renew")),
    _release,
    st.tuples(st.just("sleep"), st.floats(0.0, 0.08)),
    st.tuples(st.just("crash")),
)
_programs = st.lists(st.lists(_op, min_size=2, max_size=8), min_size=2, max_size=4)


def _live(log: Log, holder: str, at: float) -> list[Window]:
    return [w for w in log.windows if w.holder == holder and w.end > at]


async def _worker(url: str, scope: str, holder: str, program: list[tuple], log: Log) -> None:
    nc = await connect(url, name=holder)
    table = await LeaseTable.open(nc)
    try:
        for op in program:
            if op[0] == "crash":
                return  # stops renewing: whatever it holds lapses
            if op[0] == "sleep":
                await asyncio.sleep(op[1])
            elif op[0] == "acquire":
                outcome = await table.acquire(scope, holder, op[1], mode=op[2], ttl=TTL)
                if isinstance(outcome, LeaseRefusal):
                    log.refusals.append(outcome)
                    continue
                assert isinstance(outcome, LeaseGrant)
                for lease in outcome.leases:
                    live = [w for w in _live(log, holder, outcome.at) if w.pattern == lease.pattern]
                    for window in live:  # re-acquired: the old window ends where the new one starts
                        window.end = outcome.at
                    end = outcome.at + TTL
                    log.windows.append(Window(holder, lease.pattern, lease.mode, outcome.at, end, [end]))
            elif op[0] == "renew":
                moved = await table.renew(scope, holder, TTL)
                if moved:
                    assert table.last_write is not None
                    at = table.last_write.at
                    live = _live(log, holder, at)
                    assert moved == len(live)
                    for window in live:
                        window.end = at + TTL
                        window.expiries.append(window.end)
            elif op[0] == "release":
                released = await table.release(scope, holder, op[1])
                if released:
                    assert table.last_write is not None
                    at = table.last_write.at
                    live = [w for w in _live(log, holder, at) if op[1] is None or w.pattern in op[1]]
                    assert sorted(lease.pattern for lease in released) == sorted(w.pattern for w in live)
                    for window in live:
                        window.end = at
    finally:
        await nc.close()


async def _run(url: str, programs: list[list[tuple]]) -> Log:
    scope = str(uuid.uuid4())
    log = Log()
    await asyncio.gather(*(_worker(url, scope, f"w{i}", program, log) for i, program in enumerate(programs)))
    return log


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs=_programs)
def test_no_two_holders_ever_hold_conflicting_leases(nats_server: EmbeddedNats, programs: list[list[tuple]]) -> None:
    log = asyncio.run(_run(nats_server.url, programs))
    holders = {f"w{i}" for i in range(len(programs))}
    for i, a in enumerate(log.windows):
        for b in log.windows[i + 1 :]:
            if a.holder == b.holder or (a.mode == "shared" and b.mode == "shared"):
                continue
            if patterns_overlap(a.pattern, b.pattern):
                assert a.end <= b.start or b.end <= a.start, f"both held at once: {a} and {b}"
    for refusal in log.refusals:
        assert refusal.conflicts
        for lease in refusal.conflicts:
            assert lease.holder in holders - {refusal.holder}
            assert lease.expires_at is not None and lease.expires_at.timestamp() > refusal.at
            # A refusal is decided on the revision it read, a moment before its own time: the lease it
            # quotes was granted before that time, with exactly that expiry (a release may have followed).
            assert any(
                w.holder == lease.holder
                and w.pattern == lease.pattern
                and w.start <= refusal.at
                and any(abs(e - lease.expires_at.timestamp()) < 1e-5 for e in w.expiries)
                for w in log.windows
            ), f"{refusal.holder} was refused for {lease}, which nobody held"
