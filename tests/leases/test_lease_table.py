"""The lease table over a real nats-server: grants, conflicts, renewal, release, expiry, watch, races."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from nats.aio.client import Client

from autarch.cli.local.natsserver import EmbeddedNats
from autarch.runtime.bus import connect
from autarch.runtime.leases import BUCKET, LeaseGrant, LeaseRefusal, LeaseTable


@pytest.fixture
async def table(nc: Client) -> LeaseTable:
    return await LeaseTable.open(nc)


@pytest.fixture
async def other(nats_server: EmbeddedNats) -> AsyncIterator[LeaseTable]:
    """A second table on its own connection: another worker's process."""
    client = await connect(nats_server.url, name="other-worker")
    yield await LeaseTable.open(client)
    await client.drain()


@pytest.fixture
def scope() -> str:
    return str(uuid.uuid4())


async def test_grant_then_conflict_names_holder_pattern_bead_and_expiry(table: LeaseTable, scope: str) -> None:
    grant = await table.acquire(scope, "w1", ["src/auth.py", "tests/"], bead_id="b1", ttl=30)
    assert isinstance(grant, LeaseGrant)
    assert [lease.pattern for lease in grant.leases] == ["src/auth.py", "tests"]
    assert all(lease.expires_at and lease.expires_at.timestamp() > time.time() + 25 for lease in grant.leases)

    refused = await table.acquire(scope, "w2", ["tests/test_auth.py", "src/other.py"], bead_id="b2", ttl=30)
    assert isinstance(refused, LeaseRefusal)
    assert refused.holders == ["w1"]
    [conflict] = refused.conflicts
    assert (conflict.holder, conflict.pattern, conflict.bead_id, conflict.mode) == ("w1", "tests", "b1", "exclusive")
    assert "w1" in refused.message and "'tests'" in refused.message and "bead b1" in refused.message
    assert "until 20" in refused.message
    # All or nothing: src/other.py was free, yet nothing was granted to w2.
    assert {lease.holder for lease in await table.leases(scope)} == {"w1"}


async def test_shared_leases_coexist_but_exclude_exclusive(table: LeaseTable, scope: str) -> None:
    assert isinstance(await table.acquire(scope, "w1", ["docs/**"], mode="shared", ttl=30), LeaseGrant)
    assert isinstance(await table.acquire(scope, "w2", ["docs/api.md"], mode="shared", ttl=30), LeaseGrant)
    refused = await table.acquire(scope, "w3", ["docs/api.md"], ttl=30)
    assert isinstance(refused, LeaseRefusal)
    assert refused.holders == ["w1", "w2"]
    # Writing: a sharer may, a stranger may not.
    assert await table.blocking(scope, "w2", "docs/api.md") is None
    blocker = await table.blocking(scope, "w3", "docs/api.md")
    assert blocker is not None and blocker.mode == "shared"
    assert await table.blocking(scope, "w3", "src/free.py") is None


async def test_glob_and_path_leases_conflict(table: LeaseTable, scope: str) -> None:
    assert isinstance(await table.acquire(scope, "w1", ["src/**/*.py"], ttl=30), LeaseGrant)
    assert isinstance(await table.acquire(scope, "w2", ["src/deep/x.py"], ttl=30), LeaseRefusal)
    assert isinstance(await table.acquire(scope, "w2", ["src/*/*.py"], ttl=30), LeaseRefusal)
    assert isinstance(await table.acquire(scope, "w2", ["src"], ttl=30), LeaseRefusal)  # the directory
    assert isinstance(await table.acquire(scope, "w2", ["src/**/*.ts", "docs/*.md"], ttl=30), LeaseGrant)
    blocker = await table.blocking(scope, "w2", "src/a/b.py")
    assert blocker is not None and blocker.holder == "w1" and blocker.pattern == "src/**/*.py"
    assert await table.blocking(scope, "w1", "src/a/b.py") is None
    assert await table.blocking(scope, "w1", "src/a/b.ts") is not None


async def test_reacquire_renews_and_release_frees(table: LeaseTable, other: LeaseTable, scope: str) -> None:
    first = await table.acquire(scope, "w1", ["a.py"], ttl=5)
    again = await table.acquire(scope, "w1", ["./a.py", "b.py"], ttl=30)
    assert isinstance(first, LeaseGrant) and isinstance(again, LeaseGrant)
    assert len(await table.leases(scope)) == 2  # renewed in place, not doubled
    assert again.leases[0].expires_at > first.leases[0].expires_at  # type: ignore[operator]  # a lease with a ttl has an expiry

    assert [lease.pattern for lease in await table.release(scope, "w1", ["a.py"])] == ["a.py"]
    assert isinstance(await other.acquire(scope, "w2", ["a.py"], ttl=30), LeaseGrant)
    assert await table.release(scope, "w1", ["nothing.py"]) == []
    assert [lease.pattern for lease in await table.release(scope, "w1")] == ["b.py"]
    assert [lease.holder for lease in await table.leases(scope)] == ["w2"]


async def test_renew_moves_only_live_leases(table: LeaseTable, other: LeaseTable, scope: str) -> None:
    await table.acquire(scope, "w1", ["a.py", "b.py"], ttl=0.4)
    await asyncio.sleep(0.2)
    assert await table.renew(scope, "w1", 0.4) == 2
    await asyncio.sleep(0.3)
    # Renewed: still held past the first expiry.
    assert isinstance(await other.acquire(scope, "w2", ["a.py"], ttl=30), LeaseRefusal)
    await asyncio.sleep(0.3)
    # Lapsed: renewal does not revive it, and the files are free for someone else.
    assert await table.renew(scope, "w1", 30) == 0
    assert isinstance(await other.acquire(scope, "w2", ["a.py"], ttl=30), LeaseGrant)
    assert await table.renew(scope, "nobody", 30) == 0


async def test_expire_prunes_lapsed_leases(table: LeaseTable, scope: str) -> None:
    await table.acquire(scope, "w1", ["a.py"], ttl=0.2)
    await table.acquire(scope, "w2", ["b.py"], ttl=30)
    assert await table.expire(scope) == []
    await asyncio.sleep(0.3)
    assert [lease.pattern for lease in await table.leases(scope)] == ["b.py"]
    assert [lease.holder for lease in await table.expire(scope)] == ["w1"]
    assert await table.expire(scope) == []


async def test_watch_reports_changed_scopes(table: LeaseTable, other: LeaseTable, scope: str) -> None:
    await table.acquire(scope, "w1", ["a.py"], ttl=30)  # before the watch: not a change it reports
    changes: asyncio.Queue[str] = asyncio.Queue()

    async def follow() -> None:
        async for changed in other.watch():
            await changes.put(changed)

    task = asyncio.create_task(follow())
    try:
        await asyncio.sleep(0.2)  # a quiet window: the watch is up, and reports nothing from before it
        assert changes.empty()
        await table.release(scope, "w1")
        assert await asyncio.wait_for(changes.get(), 5) == scope
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_two_connections_racing_never_both_win(table: LeaseTable, other: LeaseTable, scope: str) -> None:
    for round_ in range(20):
        path = f"race/{round_}.py"
        pattern = "race/*.py" if round_ % 2 else path
        results = await asyncio.gather(
            table.acquire(scope, "w1", [path], ttl=30), other.acquire(scope, "w2", [pattern], ttl=30)
        )
        assert sum(isinstance(result, LeaseGrant) for result in results) == 1, results
        winner = next(result for result in results if isinstance(result, LeaseGrant))
        await (table if winner.holder == "w1" else other).release(scope, winner.holder)


async def test_abandoned_scope_leaves_the_bucket(nc: Client, scope: str) -> None:
    table = await LeaseTable.open(nc, key_grace=0.5)
    await table.acquire(scope, "w1", ["a.py"], ttl=0.2)
    kv = await nc.jetstream().key_value(BUCKET)
    assert (await kv.get(scope)).value
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            await kv.get(scope)
        except Exception:
            break
        await asyncio.sleep(0.2)
    else:
        pytest.fail("the scope's key outlived its TTL")
    # A scope that vanished starts again from an empty table.
    assert isinstance(await table.acquire(scope, "w2", ["a.py"], ttl=30), LeaseGrant)


async def test_bad_input_is_refused(table: LeaseTable, scope: str) -> None:
    with pytest.raises(ValueError):
        await table.acquire(scope, "w1", ["../outside"], ttl=30)
    with pytest.raises(ValueError):
        await table.acquire(scope, "w1", [], ttl=30)
    with pytest.raises(ValueError):
        await table.acquire(scope, "w1", ["a.py"], ttl=0)
    with pytest.raises(ValueError):
        await table.leases("bad scope!")
