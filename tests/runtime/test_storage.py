"""A lack of space told apart from every other failure, and reported in ``$SRV.PING`` until the path has room."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
from pathlib import Path

import msgspec
import pytest
from eventsourcing.persistence import OperationalError as ESOperationalError
from nats.aio.client import Client
from nats.js.errors import APIError

from autarch.gateway.health import check_health
from autarch.runtime.micro import TypedService
from autarch.runtime.storage import StorageFull, StorageState, free_bytes, problems_in, storage_full


def _sqlite_full() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = 13  # what SQLite sets on SQLITE_FULL
    return exc


def test_sqlite_full_is_a_lack_of_space_even_wrapped_by_eventsourcing() -> None:
    try:
        try:
            raise _sqlite_full()
        except sqlite3.OperationalError as exc:
            raise ESOperationalError(exc) from exc
    except ESOperationalError as wrapped:
        full = storage_full(wrapped, "/data/orchestrator/events.sqlite")
    assert full is not None
    assert full.path == "/data/orchestrator/events.sqlite"
    assert full.problem.kind == "disk_full"
    assert full.problem.message == "no space left on device: database or disk is full"
    assert str(full) == "no space left on device: /data/orchestrator/events.sqlite: database or disk is full"


def test_sqlite_full_without_an_error_code_is_told_by_its_words() -> None:
    # Python before 3.11 sets no sqlite_errorcode.
    assert storage_full(sqlite3.OperationalError("database or disk is full"), "x") is not None


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_oserror_enospc_and_edquot(code: int) -> None:
    full = storage_full(OSError(code, "No space left on device"), "/data/worktrees/w")
    assert full is not None and full.detail == "No space left on device"


def test_postgres_disk_full_by_sqlstate() -> None:
    class DiskFull(Exception):  # the shape of psycopg.errors.DiskFull: a sqlstate attribute
        sqlstate = "53100"

    assert storage_full(DiskFull("could not write to file"), "postgres") is not None


@pytest.mark.parametrize(("err_code", "description"), [
    (10047, "insufficient storage resources available"),
    (10023, "insufficient resources"),
])
def test_jetstream_insufficient_resources(err_code: int, description: str) -> None:
    full = storage_full(APIError(code=503, err_code=err_code, description=description), "nats/jetstream")
    assert full is not None and description in full.detail


@pytest.mark.parametrize("exc", [
    sqlite3.OperationalError("database is locked"),
    sqlite3.IntegrityError("UNIQUE constraint failed"),
    OSError(errno.EACCES, "Permission denied"),
    FileNotFoundError(errno.ENOENT, "No such file"),
    APIError(code=404, err_code=10059, description="stream not found"),
    ValueError("database or disk is full"),  # our own words in a value error are not the disk's
    RuntimeError("boom"),
])
def test_other_failures_are_not_a_lack_of_space(exc: Exception) -> None:
    assert storage_full(exc, "x") is None


def test_a_storage_full_is_passed_through() -> None:
    full = StorageFull("/p", "no room")
    assert storage_full(RuntimeError("wrapper"), "/q") is None
    assert storage_full(full, "/q") is full


def test_free_bytes_of_a_path_not_created_yet(tmp_path: Path) -> None:
    # Its nearest existing folder's free space (others write to the same disk meanwhile: within 256 MiB).
    assert abs(free_bytes(tmp_path / "not" / "yet" / "there.sqlite") - free_bytes(tmp_path)) < 256 << 20


class _CountedChecks(StorageState):
    """A storage state that counts its watch's looks at a path (each says whether the path has room)."""

    checks = 0

    def has_room(self, path: str) -> bool:
        self.checks += 1
        return super().has_room(path)


async def test_a_problem_is_dropped_once_its_path_has_room(tmp_path: Path) -> None:
    state = _CountedChecks(min_free=1 << 62, interval=0.01)  # no disk has that much room: "full"
    heard: list[int] = []
    state.listen(lambda problems: heard.append(len(problems)))
    state.report(StorageFull(str(tmp_path / "events.sqlite"), "database or disk is full"))
    state.report(StorageFull(str(tmp_path / "events.sqlite"), "database or disk is full"))  # no change
    assert heard == [0, 1]
    watch = asyncio.create_task(state.watch())
    async with asyncio.timeout(5):  # the watch has looked at the path a few times, and found no room each time
        while state.checks < 3:
            await asyncio.sleep(0.01)
    assert len(state.problems) == 1  # still full
    state.min_free = 1  # space is back
    await asyncio.wait_for(state.until_space(str(tmp_path / "events.sqlite")), 5)
    assert state.problems == [] and heard == [0, 1, 0]
    watch.cancel()


async def test_ping_and_healthz_report_a_problem_until_it_clears(nc: Client, tmp_path: Path) -> None:
    state = StorageState(min_free=1 << 62, interval=0.05)
    service = TypedService(nc, name="indexer", storage=state)
    await service.start()
    try:
        health = await check_health(nc, ["indexer"])
        assert health.status == "ok" and health.services["indexer"].problems == []

        path = str(tmp_path / "index.sqlite")
        state.report(StorageFull(path, "database or disk is full"))
        health = await check_health(nc, ["indexer"])
        assert health.status == "degraded"
        entry = health.services["indexer"]
        assert not entry.ok and entry.instances == 1
        assert [(p.kind, p.path, p.message) for p in entry.problems] == [
            ("disk_full", path, "no space left on device: database or disk is full")]
        assert msgspec.json.decode(msgspec.json.encode(health))["services"]["indexer"]["problems"][0]["path"] == path

        state.min_free = 1  # the service's own watch drops the problem
        for _ in range(100):
            health = await check_health(nc, ["indexer"])
            if health.status == "ok":
                break
            await asyncio.sleep(0.05)
        assert health.status == "ok" and health.services["indexer"].problems == []
    finally:
        await service.stop()


def test_unreadable_metadata_reports_nothing() -> None:
    assert problems_in({"storage": "not json"}) == []
    assert problems_in(None) == []


def test_a_relay_round_failing_for_lack_of_space_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autarch.runtime.relay import EventRelay
    from autarch.runtime.storage import STORAGE

    stream = tmp_path / "nats" / "jetstream"
    stream.mkdir(parents=True)
    relay = EventRelay(app=None, nc=None, to_contract=lambda e: None,  # type: ignore[arg-type]  # never used: only its storage reports run
                       store_path=str(tmp_path / "events.sqlite"), stream_path=str(stream))
    try:
        relay._report(TimeoutError())  # the stream's disk has room: a timeout is not a lack of space
        assert STORAGE.problems == []
        monkeypatch.setattr(STORAGE, "min_free", 1 << 62)
        relay._report(TimeoutError())  # unanswered while the stream's disk is full: the stream has no space
        relay._report(_sqlite_full())  # the tracking write found the store full
        assert {(p.path, p.kind) for p in STORAGE.problems} == {(str(stream), "disk_full"),
                                                                 (str(tmp_path / "events.sqlite"), "disk_full")}
        relay._report(RuntimeError("boom"))
        assert len(STORAGE.problems) == 2
    finally:
        for problem in STORAGE.problems:
            STORAGE.clear(problem.path)


async def test_a_handler_meeting_a_full_disk_answers_storage_full_and_reports_it(nc: Client, tmp_path: Path) -> None:
    from autarch.contracts.errors import ErrorCode
    from autarch.runtime.errors import RemoteError
    from autarch.runtime.requests import request
    from autarch.runtime.storage import STORAGE

    target = tmp_path / "worktree" / "f.txt"

    async def write(_: dict) -> dict:
        raise OSError(errno.ENOSPC, "No space left on device", str(target))

    service = TypedService(nc, name="git", subject_of=lambda verb: f"test.storage.{verb}")
    service.endpoint("write", dict, write)
    await service.start()
    try:
        with pytest.raises(RemoteError) as raised:
            await request(nc, "test.storage.write", {}, dict, timeout=5)
        assert raised.value.code == ErrorCode.STORAGE_FULL
        assert raised.value.reply.details == {"path": str(target)}
        assert [p.path for p in STORAGE.problems] == [str(target)]
    finally:
        for problem in STORAGE.problems:
            STORAGE.clear(problem.path)
        await service.stop()
