"""``python -m autarch.runtime.probe SERVICE``: is an instance of SERVICE answering on NATS?

A container's readiness probe (Kubernetes ``exec``, compose ``healthcheck``). Every instance of a service
answers the same ``$SRV.PING.<name>``, so by default the probe waits for the answer of an instance on this
host (each instance names its host in its ``nats.micro`` metadata): a pod whose own process is not serving
is not ready even while its siblings are. ``--any`` accepts any instance (a check from outside the pods), and
so does a named instance (the ``instance`` setting): of a stateful service's named instances only the leader
serves, and a hot standby is ready while its service is served by another (``runtime/standby.py``).

Exit status: 0 answered, 1 no (matching) instance answered in time, 2 NATS could not be reached or the
arguments are wrong. One line on stderr says which.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from dataclasses import dataclass

import nats
from nats.aio.msg import Msg
from nats.errors import Error as NatsError

from autarch.contracts.subjects import SERVICES

from .settings import SettingsError, load_settings

__all__ = ["ProbeResult", "main", "probe"]

_ANSWERED, _SILENT, _UNREACHABLE = 0, 1, 2


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe saw."""

    host: str
    """The host whose instances count as local."""
    instances: int
    """Instances that answered, wherever they run."""
    local: int
    """Of those, the instances on ``host``."""


async def probe(url: str, service: str, *, host: str, timeout: float = 2.0, accept_any: bool = False) -> ProbeResult:
    """Ping ``service`` over NATS at ``url`` and count the instances that answer within ``timeout`` seconds.

    Stops waiting at the first answer from ``host`` (from anywhere with ``accept_any``). Raises nats' errors
    (and ``OSError``, ``TimeoutError``) when the server cannot be reached.
    """
    nc = await nats.connect(
        [server.strip() for server in url.split(",") if server.strip()],
        name=f"autarch-probe-{service}",
        connect_timeout=timeout,
        allow_reconnect=False,
        max_reconnect_attempts=1,
    )
    instances = local = 0
    enough = asyncio.Event()

    async def on_answer(msg: Msg) -> None:
        nonlocal instances, local
        try:
            answer = json.loads(msg.data)
        except ValueError:
            return  # not a micro ping answer; nothing of ours sends that
        instances += 1
        if (answer.get("metadata") or {}).get("host") == host:
            local += 1
        if local or accept_any:
            enough.set()

    try:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, cb=on_answer)
        await nc.publish(f"$SRV.PING.{service}", b"", reply=inbox)
        await nc.flush(timeout=timeout)  # type: ignore[arg-type]  # nats-py says int; any number of seconds works
        try:
            await asyncio.wait_for(enough.wait(), timeout)
        except TimeoutError:
            pass
        await sub.unsubscribe()
    finally:
        await nc.close()
    return ProbeResult(host=host, instances=instances, local=local)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autarch.runtime.probe",
        description="Exit 0 when an instance of SERVICE answers $SRV.PING (by default: one on this host).",
    )
    parser.add_argument("service", help=f"one of {', '.join(SERVICES)}")
    parser.add_argument("--any", action="store_true", help="accept an instance on any host")
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for an answer (default 2)")
    parser.add_argument("--nats-url", help="NATS server(s), comma-separated; default the nats_url setting")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.service not in SERVICES:
        print(f"probe: unknown service {args.service!r}; expected one of {', '.join(SERVICES)}", file=sys.stderr)
        return _UNREACHABLE
    if args.timeout <= 0:
        print(f"probe: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return _UNREACHABLE
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"probe: {exc}", file=sys.stderr)
        return _UNREACHABLE
    url = args.nats_url or settings.effective_nats_url
    accept_any = args.any or bool(getattr(settings, "instance", ""))
    host = socket.gethostname()
    try:
        result = asyncio.run(probe(url, args.service, host=host, timeout=args.timeout, accept_any=accept_any))
    except (NatsError, OSError, TimeoutError) as exc:
        print(f"probe: NATS at {url} unreachable: {exc or type(exc).__name__}", file=sys.stderr)
        return _UNREACHABLE
    if result.local or (accept_any and result.instances):
        return _ANSWERED
    where = "" if accept_any else f" on host {host}"
    print(f"probe: no instance of {args.service}{where} answered in {args.timeout:g}s "
          f"({result.instances} elsewhere)", file=sys.stderr)
    return _SILENT


if __name__ == "__main__":
    sys.exit(main())
