"""SIGKILL a ``python -m autarch.services.notifier`` process mid-way: after a restart every notification
arrives, none twice by ``Idempotency-Key`` beyond a resend of the one in flight, and the record is complete."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from autarch.services.notifier.service import CONSUMER

from .conftest import deliveries, fresh_consumer, now, publish
from .receiver import Receiver
from .test_notifier import _iteration, _wait_state


def _spawn(nats_url: str, data_dir: Path, hook: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "AUTARCH_NATS_URL": nats_url, "AUTARCH_DATA_DIR": str(data_dir),
           "AUTARCH_NOTIFY_WEBHOOKS": hook, "AUTARCH_NOTIFY_BACKOFF_INITIAL": "0.05",
           "AUTARCH_NOTIFY_BACKOFF_MAX": "0.2", "AUTARCH_NOTIFY_MAX_ATTEMPTS": "100"}
    return subprocess.Popen([sys.executable, "-m", "autarch.services.notifier"], env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("ab"))


async def _until(predicate: Any, timeout: float = 30.0) -> None:
    async def poll() -> None:
        while not await predicate():
            await asyncio.sleep(0.02)

    await asyncio.wait_for(poll(), timeout)


async def test_sigkill_mid_way_loses_and_doubles_nothing(nc: Client, nats_server: Any, data_dir: Path,
                                                         tmp_path: Path) -> None:
    await fresh_consumer(nc, CONSUMER)
    receiver = Receiver()
    session = str(uuid.uuid4())
    log = tmp_path / "notifier.log"
    hook = f"{receiver.url}/hook"
    process = _spawn(nats_server.url, data_dir, hook, log)
    try:
        for number in (1, 2, 3):
            await publish(nc, _iteration(session, number))

        async def recorded() -> bool:
            try:
                return len((await deliveries(nc, session)).deliveries) == 3
            except Exception:  # not serving yet
                return False

        await _until(recorded)  # recorded and acknowledged; the receiver is down
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        await receiver.start()
        for number in (4, 5, 6):  # published while no notifier runs
            await publish(nc, _iteration(session, number))
        process = _spawn(nats_server.url, data_dir, hook, log)
        await receiver.wait_for(2)
        process.send_signal(signal.SIGKILL)  # again, while delivering
        process.wait(10)
        process = _spawn(nats_server.url, data_dir, hook, log)
        await _wait_state(nc, session, "delivered", 6)
        record = (await deliveries(nc, session)).deliveries
        assert len(record) == 6
        by_key = {r.headers["idempotency-key"]: r.body["iteration"] for r in receiver.received}
        assert by_key == {d.delivery_id: int(d.text.split("/")[0].split()[-1]) for d in record}
        assert sorted(by_key.values()) == [1, 2, 3, 4, 5, 6]
        # At most the one request in flight at the kill is sent again, with its key.
        assert len(receiver.received) - len(by_key) <= 1
        # A later event is said once.
        await publish(nc, _iteration(session, 7))
        await _wait_state(nc, session, "delivered", 7)
        assert "durable consumer notifier; 3 deliveries pending" in log.read_text()
        assert now() is not None
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)
        await receiver.stop()
