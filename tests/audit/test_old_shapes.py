"""A stream that outlived a rename: the agent runner published a session's events with its run in ``workflow_id``
(version 1, before issue 33); today's relay would publish ``run_id`` (version 2). ``autarch audit verify`` compares
such a message as it reads today, so an untouched old message is no finding, and a changed one still is."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

import autarch.runtime.relay as relay_module
from autarch.contracts import subjects
from autarch.contracts.base import encode
from autarch.runtime.audit import AuditReport, StreamMessage, read_stream, relay_position, verify_stream
from autarch.runtime.relay import EventRelay
from autarch.runtime.sqlite_store import MODULE as SQLITE_MODULE
from autarch.services.agent_runner.application import SessionApplication
from autarch.services.agent_runner.contract_events import ContractMapper
from autarch.services.agent_runner.domainmodel import Session


def _as_before_issue_33(event: Any) -> bytes:
    """What a runner before issue 33 published for ``event``: its run as ``workflow_id``, no schema version."""
    raw = json.loads(encode(event))
    raw["workflow_id"] = raw.pop("run_id")
    del raw["schema_version"]
    return json.dumps(raw).encode()


async def test_a_session_published_before_run_id_verifies_against_its_store(nc, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    loop = str(uuid.uuid4())
    app = SessionApplication(env={"PERSISTENCE_MODULE": SQLITE_MODULE, "SQLITE_DBNAME": str(tmp_path / "s.sqlite")})
    try:
        session = Session(session_id=str(uuid.uuid4()), role="loop", model="m", root="/wt", run_id=loop,
                          channel_id=None, script=None, notes=[])
        session.close(reason="done")
        app.save(session)
        wire = ContractMapper(run_of=lambda _: loop)
        with monkeypatch.context() as patch:
            patch.setattr(relay_module, "encode", _as_before_issue_33)
            relay = EventRelay(app=app, nc=nc, to_contract=wire, checkpoint_interval=0)
            while await relay.publish_pending():
                pass
        messages = await read_stream(nc, subjects.EVENTS_STREAM, subjects.run_events(loop))
        assert [json.loads(m.data).get("workflow_id") for m in messages] == [loop, loop]  # the old shape
        report = AuditReport(store=app.name)
        verify_stream(app, wire, messages, report, position=relay_position(app))
        assert report.ok and report.stream_messages == 2, [f.line() for f in report.findings]

        # An old-shaped message saying something else than the store is still a finding.
        first = messages[0]
        changed = [StreamMessage(seq=first.seq, subject=first.subject, headers=first.headers,
                                 data=first.data.replace(b'"loop"', b'"pulsing"')), *messages[1:]]
        tampered = AuditReport(store=app.name)
        verify_stream(app, wire, changed, tampered, position=relay_position(app))
        assert [f.kind for f in tampered.findings if f.tampering] == ["differs_on_stream"]
    finally:
        app.close()
