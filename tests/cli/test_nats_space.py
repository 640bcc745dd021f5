"""The embedded nats-server on a disk that fills: its stream takes no write after the failed one, even with room
again, until the server restarts; the supervisor's watch restarts it once there is room, and nothing is lost or
doubled (the repeat of an unacknowledged publish is dropped by its message id)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js.api import StreamConfig
from nats.js.errors import APIError

from autarch.cli.local.nats_space import restart_after_full_disk
from autarch.cli.local.natsserver import EmbeddedNats


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as out:
        for size in (1 << 20, 4096):
            with contextlib.suppress(OSError):
                while True:
                    out.write(b"\0" * size)
    return filler


async def test_a_stream_that_found_no_space_writes_again_after_the_watch_restarts_its_server(
        small_disk: Path, tmp_path: Path) -> None:
    server = EmbeddedNats(small_disk / "nats").start()
    restarts = 0

    async def restart() -> None:
        nonlocal restarts
        restarts += 1
        server.stop()
        await server.start_async()

    watch = asyncio.create_task(restart_after_full_disk(small_disk / "nats" / "jetstream",
                                                        small_disk / "nats" / "nats-server.log", restart,
                                                        interval=0.1))
    nc = await nats.connect(server.url, max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    try:
        js = nc.jetstream(timeout=2)
        await js.add_stream(StreamConfig(name="S", subjects=["s.>"]))
        await js.publish("s.a", b"before", headers={"Nats-Msg-Id": "1"})
        filler = fill(small_disk)
        # No answer at all (a timeout; the server logs the failure), or a refusal from another version.
        with pytest.raises((NatsTimeoutError, APIError)):
            await js.publish("s.a", b"x" * 100_000, headers={"Nats-Msg-Id": "2"})
        filler.unlink()
        deadline = time.monotonic() + 30
        while restarts == 0:  # the watch saw the store full and, with room again, restarts the server
            assert time.monotonic() < deadline, "the watch did not restart nats-server within 30 s of room again"
            await asyncio.sleep(0.05)

        async def published() -> int:
            for _ in range(150):
                try:
                    ack = await js.publish("s.a", b"x" * 100_000, headers={"Nats-Msg-Id": "2"})
                    return ack.seq
                except Exception:
                    await asyncio.sleep(0.1)
            raise AssertionError("the stream never took a write again")

        seq = await published()
        assert restarts >= 1
        again = await js.publish("s.a", b"x" * 100_000, headers={"Nats-Msg-Id": "2"})
        assert again.duplicate and again.seq == seq  # a repeat is dropped by its message id
        info = await js.stream_info("S")
        assert info.state.messages == 2
    finally:
        watch.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watch
        await nc.close()
        server.stop()
