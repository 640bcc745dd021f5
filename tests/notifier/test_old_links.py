"""A Telegram Stop button sent before issue 33 names a link the outbox kept in ``action_links.workflow_id`` (for a
blocked loop, its session's id); today the column is ``run_id``. An outbox written then is opened with the column
renamed and every kept link in it: the button still finds its link, and the link (signed ``w`` then) still verifies
for that loop."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

from autarch.runtime.action_links import verify
from autarch.services.notifier.outbox import LinkRow, Outbox
from tests.gateway.test_old_action_links import minted_before_issue_33

KEY = b"k" * 43


def test_an_outbox_written_before_run_id_keeps_its_blocked_loops_stop_links(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    loop = str(uuid.uuid4())
    token = minted_before_issue_33(KEY, loop=loop, iteration=3)
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE action_links (nonce TEXT PRIMARY KEY, delivery_id TEXT NOT NULL, workflow_id TEXT NOT "
                "NULL, token TEXT NOT NULL, chat_id TEXT, created_at REAL NOT NULL)")
    old.execute("INSERT INTO action_links VALUES ('n1', 'd1', ?, ?, '42', 0)", (loop, token))
    old.commit()
    old.close()

    for _ in range(2):  # opened again, an outbox already renamed stays as it is
        outbox = Outbox(path)
        try:
            row = outbox.link("n1")
        finally:
            outbox.close()
        assert row == LinkRow(nonce="n1", delivery_id="d1", run_id=loop, token=token, chat_id="42")
    link = verify(KEY, row.token)
    assert (link.run_id, link.stage, link.card_version, link.action) == (loop, "blocked", 3, "stop")
