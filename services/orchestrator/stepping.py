"""Running each aggregate's next steps one at a time: what the workflow and loop drivers share.

A *kick* makes sure a key (a workflow id, a loop session id) is advanced soon; kicks that come while it is being
advanced coalesce into one more pass. A pass calls ``advance(key)`` (which takes steps until none is left); a
service that is restarting (``unavailable``, ``timeout``, ``conflict``) or an unexpected failure is retried after
the :data:`~autarch.runtime.retry.DRIVER_STEP` waits, and a failure a retry will not fix goes to ``fail(key,
message)`` (the aggregate records it and waits for a person). A lack of space (a service's ``storage_full``, or
this service's own store) goes to ``no_space(key, full)`` (a workflow halts ``disk_full``), or, without one, is
retried like a restarting service until there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import msgspec
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import api

from autarch.contracts import subjects
from autarch.contracts.agents import SessionStopped, StopSession
from autarch.contracts.errors import ErrorCode
from autarch.contracts.events import TurnCompleted, decode_as
from autarch.runtime.cancel import cancel_and_wait
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.pulls import PullConsumer
from autarch.runtime.requests import request
from autarch.runtime.retry import DRIVER_STEP
from autarch.runtime.service_gate import ServiceGate
from autarch.runtime.settings import OrchestratorSettings
from autarch.runtime.storage import StorageFull, remote_storage_full

from .partition import Partition

__all__ = ["RETRIED", "TURN_ACK_WAIT", "Stepper", "TurnFeed", "ask_service", "stop_agent_session", "turn_consumer"]

RETRIED = {ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT, ErrorCode.CONFLICT}
"""A service restarting, or a session still finishing its turn: worth asking again shortly."""


class Stepper:
    """Advances keys, one pass per key at a time, with background work that ends with it.

    Built before its driver, so that what kicks it (a book's ``on_change``) needs nothing else: keys kicked
    before :meth:`start` gave it its ``advance`` wait for it.
    """

    def __init__(self, *, kind: str, log: logging.Logger, gate: ServiceGate | None = None) -> None:
        self.kind = kind
        """What a key names, for log lines (``workflow``, ``loop``)."""
        self._gate = gate
        """Services known to have no instance: a key waiting for one waits here, at no cost, until it is back."""
        self._advance: Callable[[str], Awaitable[None]] | None = None
        self._fail: Callable[[str, str], Awaitable[None]] | None = None
        self._no_space: Callable[[str, StorageFull], Awaitable[None]] | None = None
        self._log = log
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._again: set[str] = set()
        self._waiting: set[str] = set()
        """Keys kicked before :meth:`start`."""
        self._background: set[asyncio.Task[None]] = set()
        self.stopping = False

    def start(self, *, advance: Callable[[str], Awaitable[None]], fail: Callable[[str, str], Awaitable[None]],
              no_space: Callable[[str, StorageFull], Awaitable[None]] | None = None) -> None:
        """Advance keys from now on: ``advance(key)`` takes a key's steps, ``fail(key, message)`` records a failure
        a retry will not fix, ``no_space(key, full)`` one that waits for space (without it: retried like an
        unexpected failure)."""
        self._advance, self._fail, self._no_space = advance, fail, no_space
        waiting, self._waiting = self._waiting, set()
        for key in waiting:
            self.kick(key)

    def kick(self, key: str) -> None:
        """Make sure ``key`` is advanced soon (coalesces kicks that come while it advances)."""
        if self.stopping:
            return
        if self._advance is None:
            self._waiting.add(key)
            return
        if key in self._tasks:
            self._again.add(key)
            return
        self._tasks[key] = asyncio.create_task(self._passes(key), name=f"{self.kind}-{key}")

    def in_background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` beside the steps (cancelled on stop); a failure is logged, never raised."""
        async def guarded() -> None:
            try:
                await work
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log.exception("%s background work failed", self.kind)

        task = asyncio.create_task(guarded())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [*self._tasks.values(), *self._background]

    async def stop(self) -> None:
        self.stopping = True
        await cancel_and_wait(self.tasks())

    async def _passes(self, key: str) -> None:
        advance, fail = self._advance, self._fail
        assert advance is not None and fail is not None, "a key passes only once the stepper started"
        waits = DRIVER_STEP.delays()
        delay = next(waits)
        try:
            while True:
                self._again.discard(key)
                try:
                    await advance(key)
                    waits = DRIVER_STEP.delays()
                    delay = next(waits)
                except RemoteError as exc:
                    full = remote_storage_full(exc.code, exc.message, exc.reply.details, "")
                    if full is not None and self._no_space is not None:
                        delay = await self._halt_for_space(key, full, delay, waits)
                        continue
                    if full is not None:
                        # Not a person's to fix: the step is tried again until the service has room.
                        self._log.warning("%s %s waits for space: %s; retrying in %.1fs", self.kind, key, full, delay)
                        await asyncio.sleep(delay)
                        delay = next(waits)
                        self._again.add(key)
                        continue
                    if exc.code not in RETRIED:
                        await fail(key, f"{exc.subject}: {exc.code}: {exc.message}")
                        continue
                    service = subjects.service_of(exc.subject)
                    if self._gate is not None and service and self._gate.is_down(service):
                        # Nobody serves it: wait for the gate's one probe instead of every key polling.
                        self._log.info("%s %s waits for %s to come back", self.kind, key, service)
                        await self._gate.until_up(service)
                    else:
                        self._log.info("%s %s waits for %s (%s); retrying in %.1fs", self.kind, key, exc.subject,
                                       exc.code, delay)
                        await asyncio.sleep(delay)
                        delay = next(waits)
                    self._again.add(key)
                except StorageFull as full:  # this service's own store
                    if self._no_space is not None:
                        delay = await self._halt_for_space(key, full, delay, waits)
                        continue
                    self._log.warning("%s %s waits for space: %s; retrying in %.1fs", self.kind, key, full, delay)
                    await asyncio.sleep(delay)
                    delay = next(waits)
                    self._again.add(key)
                except ServiceFailure as exc:
                    self._log.warning("%s %s: %s", self.kind, key, exc)
                except Exception:
                    self._log.exception("%s %s: driving failed", self.kind, key)
                    await asyncio.sleep(delay)
                    delay = next(waits)
                    self._again.add(key)
                if key not in self._again:
                    break
        finally:
            self._tasks.pop(key, None)

    async def _halt_for_space(self, key: str, full: StorageFull, delay: float, waits: Any) -> float:
        """Halt ``key`` for lack of space; a halt that cannot be recorded either is tried again after ``delay``.
        The next delay."""
        assert self._no_space is not None
        try:
            await self._no_space(key, full)
            return delay
        except Exception as exc:
            self._log.warning("%s %s: halt for lack of space not recorded (%s); retrying in %.1fs", self.kind, key,
                              exc, delay)
            await asyncio.sleep(delay)
            self._again.add(key)
            return float(next(waits))


TURN_ACK_WAIT = 30.0
"""Seconds before JetStream hands out again a turn event whose handler did not acknowledge it (handling is
idempotent on the turn id, so a slow handler seeing its event twice changes nothing)."""

_TURN_DECODER = msgspec.json.Decoder(TurnCompleted)


def turn_consumer(nc: Client, *, durable: str, on_turn: Callable[[TurnCompleted], Awaitable[None]],
                  kind: str, log: logging.Logger, owns: Callable[[str], bool] | None = None) -> PullConsumer:
    """The durable consumer of every ``turn:completed`` on the stream: ``on_turn`` gets each one, and the event is
    acknowledged once it returned (an undecodable one at once; one whose handling failed comes again).

    ``owns``: an orchestrator partition's test of a workflow or loop id; the turns of the others are acknowledged
    unhandled (each partition has a durable consumer of its own, so every turn reaches its owner's).
    """

    async def handle(msg: Msg) -> None:
        try:
            event = decode_as(_TURN_DECODER, msg.data)  # a version 1 turn too (issue 33)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("%s turn consumer: undecodable event on %s: %s", kind, msg.subject, exc)
            await msg.ack()
            return
        if owns is not None and not owns(event.run_id):
            with contextlib.suppress(Exception):
                await msg.ack()
            return
        try:
            await on_turn(event)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("turn %s of %s %s not handled yet (%s); redelivering", event.turn_id, kind,
                        event.run_id, exc)
            with contextlib.suppress(Exception):
                await msg.nak(delay=1)
            return
        with contextlib.suppress(Exception):  # disconnected: the turn comes again after ack_wait, handled once
            await msg.ack()

    config = api.ConsumerConfig(durable_name=durable, ack_policy=api.AckPolicy.EXPLICIT, ack_wait=TURN_ACK_WAIT,
                                max_ack_pending=256, deliver_policy=api.DeliverPolicy.ALL,
                                filter_subject=subjects.event("*", "turn", "*", "completed"))
    return PullConsumer(nc, stream=subjects.EVENTS_STREAM, config=config, handle=handle)


class TurnFeed:
    """What both drivers follow alike: their durable turn consumer (one per partition, handing on only the
    partition's own turns) and their watchdog task, started with the keys a restart picks up, stopped with the
    driver's steps."""

    def __init__(self, nc: Client, *, durable: str, kind: str, partition: Partition,
                 on_turn: Callable[[TurnCompleted], Awaitable[None]], log: logging.Logger) -> None:
        self._consumer = turn_consumer(nc, durable=durable + partition.suffix, on_turn=on_turn, kind=kind, log=log,
                                       owns=partition.owns if partition.split else None)
        self._kind = kind
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, watchdog: Coroutine[Any, Any, None], steps: Stepper, keys: list[str],
                    kick: Callable[[str], None], catch_up: Callable[[str], Coroutine[Any, Any, None]]) -> None:
        """Follow the turns, run ``watchdog``, and pick up each of ``keys`` where the last process left it."""
        await self._consumer.start()
        self._tasks = [asyncio.create_task(self._consumer.run(), name=f"{self._kind}-turns"),
                       asyncio.create_task(watchdog, name=f"{self._kind}-watchdog")]
        for key in keys:
            kick(key)
            steps.in_background(catch_up(key))

    async def stop(self, steps: Stepper) -> None:
        await asyncio.gather(steps.stop(), cancel_and_wait(self._tasks))
        # Messages left in the subscription's queue would hold the connection's drain until it times out; they
        # are not acked, so JetStream hands them out again.
        await self._consumer.stop()


T = TypeVar("T")


async def ask_service(nc: Client, settings: OrchestratorSettings, service: str, verb: str, payload: msgspec.Struct,
                      reply: type[T]) -> T:
    """A driver's request to another service.

    Every request the drivers make is idempotent (deterministic session, message, pulse and attempt ids; git
    recognises a repeated checkpoint or merge), so one whose service instance was killed mid-request is sent again
    as soon as that is noticed, and a timeout is simply retried by the driver's next pass.
    """
    timeout = settings.git_request_timeout if service == "git" else settings.request_timeout
    return await request(nc, subjects.request(service, verb), payload, reply, timeout=timeout,
                         retry_unavailable=2.0, idempotent=True)


async def stop_agent_session(nc: Client, settings: OrchestratorSettings, session_id: str, reason: str, *,
                             close: bool = False) -> None:
    """Cancel the session's running turn (and with ``close``, end the session).

    A session the runner does not know was never opened (a step stopped before its session started), so there
    is nothing to stop: that is not an error for whoever stops it.
    """
    try:
        await ask_service(nc, settings, "agent_runner", "stop_session",
                          StopSession(session_id=session_id, reason=reason, close=close), SessionStopped)
    except RemoteError as exc:
        if exc.code != ErrorCode.NOT_FOUND:
            raise
