"""A demo-like orchestrator log on SQLite or PostgreSQL, and raw access to its rows for tampering."""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass
from typing import Any

from autarch.contracts.workflows import CreateWorkflow
from autarch.runtime.eventstore import event_store_env
from autarch.runtime.settings import Settings
from autarch.services.orchestrator.application import WorkflowApplication

from ..conftest import postgres_dsn

DSN = postgres_dsn()


@dataclass
class Store:
    """The orchestrator's store and a way to change its rows behind the application's back."""

    settings: Settings
    kind: str
    schema: str | None = None

    def app(self) -> WorkflowApplication:
        return WorkflowApplication(env=event_store_env(self.settings, "orchestrator"))

    @property
    def events(self) -> str:
        return f'"{self.schema}".orchestrator_events' if self.kind == "postgres" else "stored_events"

    @property
    def chain(self) -> str:
        """Where the links are: a table beside the events on PostgreSQL, the events' own rows on SQLite."""
        return f'"{self.schema}".orchestrator_events_chain' if self.kind == "postgres" else self.events

    def key(self, aggregate: str) -> Any:
        return uuid.UUID(aggregate) if self.kind == "postgres" else uuid.UUID(aggregate).hex

    def execute(self, statement: str, *params: Any) -> list[Any]:
        """Run one statement on a connection of our own (``?`` placeholders on both stores)."""
        if self.kind == "postgres":
            import psycopg

            assert DSN is not None
            with psycopg.connect(DSN, autocommit=True) as pg:
                cur = pg.execute(statement.replace("?", "%s"), params)
                return cur.fetchall() if cur.description else []
        conn = sqlite3.connect(self.settings.data_path / "orchestrator" / "events.sqlite")
        try:
            with conn:
                return conn.execute(statement, params).fetchall()
        finally:
            conn.close()

    def state(self, aggregate: str, version: int) -> bytes:
        rows = self.execute(f"SELECT state FROM {self.events} WHERE originator_id=? AND originator_version=?",
                            self.key(aggregate), version)
        return bytes(rows[0][0])

    def set_state(self, aggregate: str, version: int, state: bytes) -> None:
        self.execute(f"UPDATE {self.events} SET state=? WHERE originator_id=? AND originator_version=?",
                     state, self.key(aggregate), version)

    def delete(self, aggregate: str, version: int, *, link_too: bool = False) -> None:
        for table in dict.fromkeys((self.events, self.chain) if link_too else (self.events,)):
            self.execute(f"DELETE FROM {table} WHERE originator_id=? AND originator_version=?",
                         self.key(aggregate), version)

    def swap(self, aggregate: str, a: int, b: int) -> None:
        """Exchange two events' versions (the events table only, as someone reordering history would)."""
        key = self.key(aggregate)
        for old, new in ((a, -1), (b, a), (-1, b)):
            self.execute(f"UPDATE {self.events} SET originator_version=? WHERE originator_id=? "
                         "AND originator_version=?", new, key, old)

    def insert(self, aggregate: str, version: int, topic: str, state: bytes) -> None:
        self.execute(f"INSERT INTO {self.events} (originator_id, originator_version, topic, state) VALUES (?,?,?,?)",
                     self.key(aggregate), version, topic, state)


def demo_log(app: WorkflowApplication, workflows: int = 3, notes: int = 4) -> list[str]:
    """Workflows with a few events each (created, notes, an error), as a run of the demo leaves them."""
    ids = []
    for w in range(workflows):
        wf, _ = app.new_workflow(CreateWorkflow(workflow_id=str(uuid.uuid4()), title=f"demo {w}", request="r",
                                                repo="/r"))
        app.save(wf)
        for i in range(notes):
            wf.take_note(session_id="s", note=f"note {i} of workflow {w}", key=f"k{i}")
            app.save(wf)
        wf.record_error(stage="scoping", message="the model was slow")
        app.save(wf)
        ids.append(str(wf.id))
    return ids
