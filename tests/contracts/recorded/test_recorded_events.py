"""Every event a real run records validates against its published schema and carries its schema version.

The demo workflow (full path: three approved cards, preflight, pulses, review) and the bundled ``swarm``
scenario (a bead plan on three workers) run on one system with every service a process; then the whole
stream, from its first event to its last sequence, is read over SSE as a client reads it. Each event's
``data`` must validate, with a strict Draft 2020-12 validator and format checks, against
``docs/contracts/schemas/events.AnyEvent.json`` and against its own type's published schema, and carry the
``schema_version`` that schema's ``$id`` names.
"""

from __future__ import annotations

import asyncio
import json
import typing
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import nats
import pytest

from autarch.cli.contracts_cmd import schema_version
from autarch.contracts import subjects
from autarch.contracts.events import AnyEvent
from tests.swarm.conftest import swarm_scenario
from tests.system import System
from tests.workflows.conftest import Client, approve_stages, demo_scenario, finish, start

pytestmark = pytest.mark.slow

SCHEMAS = Path(__file__).parents[3] / "docs" / "contracts" / "schemas"
EVENT_CLASSES = {cls.__struct_config__.tag: cls for cls in typing.get_args(AnyEvent)}


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


async def _last_sequence(system: System) -> int:
    nc = await nats.connect(f"nats://127.0.0.1:{system.nats_port}")
    try:
        return (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    finally:
        await nc.close()


def _recorded(system: System, last: int) -> list[tuple[int, str, dict[str, Any]]]:
    """(sequence, SSE event name, data) of every recorded event of the stream, 1 to ``last``, read over SSE."""
    found: list[tuple[int, str, dict[str, Any]]] = []
    seq, name = None, None
    params = {"since": "0", "deltas": "false"}
    with httpx.Client(base_url=system.url, headers=system.headers) as http, \
            http.stream("GET", "/api/events", params=params, timeout=30) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("id:"):
                seq = int(line.split(":", 1)[1])
            elif line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and name is not None and seq is not None:
                found.append((seq, name, json.loads(line.split(":", 1)[1])))
                if seq >= last:
                    return found
                seq, name = None, None
    return found


def test_every_recorded_event_validates_against_its_published_schema(client: Client, model,
                                                                      tmp_path: Path) -> None:
    wid, _ = start(client, model, tmp_path / "demo", demo_scenario())
    approve_stages(client, wid)
    finish(client, wid)
    sid, _ = start(client, model, tmp_path / "swarm", swarm_scenario(), branch="autarch/shapes")
    approve_stages(client, sid)
    finish(client, sid)

    last = asyncio.run(_last_sequence(client.system))
    events = _recorded(client.system, last)
    assert [seq for seq, _, _ in events] == list(range(1, last + 1)), "the stream was not read whole"

    union = _validator("events.AnyEvent")
    own: dict[str, jsonschema.Draft202012Validator] = {}
    problems: list[str] = []
    for seq, name, data in events:
        cls = EVENT_CLASSES.get(data.get("type"))
        if cls is None or name != data["type"]:
            problems.append(f"#{seq} {name}: type {data.get('type')!r} is no published event type")
            continue
        checker = own.setdefault(cls.__name__, _validator(f"events.{cls.__name__}"))
        for validator in (union, checker):
            problems += [f"#{seq} {name}: {e.json_path}: {e.message}" for e in validator.iter_errors(data)]
        version = checker.schema["$id"].rsplit("/v", 1)[1].removesuffix(".json")
        if data.get("schema_version") != schema_version(cls) or str(data.get("schema_version")) != version:
            problems.append(f"#{seq} {name}: schema_version {data.get('schema_version')!r}, its schema is v{version}")
    assert not problems, "\n".join(problems[:50])

    # The run covered every family of events, both workflows included.
    seen = {name for _, name, _ in events}
    assert {"workflow:created", "workflow:completed", "preflight:completed", "pulse:completed", "session:started",
            "turn:completed", "turn:tool_completed", "swarm:started", "swarm:finished", "bead:claimed",
            "bead:closed", "lease:granted", "worker:joined"} <= seen, sorted(seen)
    assert {data["workflow_id"] for _, name, data in events if name == "workflow:completed"} == {wid, sid}
