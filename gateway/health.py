"""``/healthz``: NATS and each expected service, by ``$SRV.PING``.

A service is degraded, though it answers, while an instance reports in its ``$SRV.PING`` metadata a path it cannot
write for lack of space (``runtime/storage.py``); the health lists those problems.

A service is up when one instance answers, except the orchestrator split in partitions: each of its instances
says in its ``$SRV.PING`` metadata which partition it serves (``"partition": "k/P"``), and it is up only when
every partition ``0 … P-1`` answers (each is served by one instance at a time, so one between two holders is
down). The count comes from the answers, not from this process's settings, so ``autarch status`` run from any
shell judges a cluster by what it really runs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from autarch.contracts.http import Health, ServiceHealth
from autarch.contracts.storage import StorageProblem
from autarch.contracts.subjects import PARTITION_METADATA
from autarch.runtime.storage import problems_in

__all__ = ["check_health", "partitions_served", "ping_service", "service_problems", "service_up"]

Answers = list[dict[str, Any]]


async def ping_service(nc: Client, name: str, *, wait: float = 0.25,
                       enough: Callable[[Answers], bool] | None = None) -> Answers:
    """The ``$SRV.PING`` answers of ``name``'s instances within ``wait`` seconds; counting stops a moment after
    ``enough`` holds of them (default: one answer; ``lambda _: False`` waits the whole window)."""
    enough = enough or (lambda answers: len(answers) >= 1)
    inbox = nc.new_inbox()
    answers: Answers = []
    done = asyncio.Event()

    async def on_reply(msg: Msg) -> None:
        if msg.headers and msg.headers.get("Status") == "503":
            # The server's "no responders" to a ping nobody answers (no instance of the service yet, e.g. one
            # still rebuilding its state): not an instance. Counted as one, /healthz said a service was up
            # minutes before it served anything.
            return
        try:
            answer = json.loads(msg.data)
        except ValueError:
            answer = {}
        answers.append(answer if isinstance(answer, dict) else {})
        if enough(answers):
            done.set()

    sub = await nc.subscribe(inbox, cb=on_reply)
    try:
        await nc.publish(f"$SRV.PING.{name}", b"", reply=inbox)
        try:
            await asyncio.wait_for(done.wait(), wait)
            await asyncio.sleep(0.02)  # let other instances' answers arrive
        except TimeoutError:
            pass
    finally:
        await sub.unsubscribe()
    return answers


def partitions_served(answers: Answers) -> tuple[int, set[int]]:
    """(the partition count the instances report, the partitions answering); (0, ∅) when none reports one."""
    count, served = 0, set()
    for answer in answers:
        tag = (answer.get("metadata") or {}).get(PARTITION_METADATA, "")
        index, _, total = str(tag).partition("/")
        if index.isdigit() and total.isdigit():
            count = max(count, int(total))
            served.add(int(index))
    return count, served


def service_up(answers: Answers) -> bool:
    """Whether a service serves everything it should: an instance answers, and for a partitioned service, every
    partition does."""
    count, served = partitions_served(answers)
    if count > 1:
        return served >= set(range(count))
    return bool(answers)


def service_problems(answers: Answers) -> list[StorageProblem]:
    """The storage problems the instances report (``runtime/storage.py``), one per path."""
    found: dict[str, StorageProblem] = {}
    for answer in answers:
        for problem in problems_in(answer.get("metadata")):
            found.setdefault(problem.path, problem)
    return list(found.values())


async def check_health(nc: Client | None, services: list[str]) -> Health:
    if nc is None or not nc.is_connected:
        return Health(
            status="degraded",
            nats=False,
            services={name: ServiceHealth(ok=False, instances=0) for name in services},
        )
    found = await asyncio.gather(*(ping_service(nc, name, enough=service_up) for name in services))
    result = {}
    for name, answers in zip(services, found, strict=True):
        # A service that cannot write for lack of space answers, but does not work: degraded until it has room.
        problems = service_problems(answers)
        result[name] = ServiceHealth(ok=service_up(answers) and not problems, instances=len(answers),
                                     problems=problems)
    status = "ok" if all(s.ok for s in result.values()) else "degraded"
    return Health(status=status, nats=True, services=result)
