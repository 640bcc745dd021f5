"""The few private names of other packages Autarch still relies on, each because no public API does the job.

Each test fails with a message naming what moved and what stops working, so an upgrade of Python or of
a dependency that breaks one of them is noticed here rather than as a silent slowdown.
"""

from __future__ import annotations

import re

from autarch.services.tools.grep import compile_pattern


def test_re_parser_for_the_grep_literal_prefilter():
    # services/tools/grep.py: no public API parses a regex (sre_parse is deprecated since 3.11).
    try:
        from re import _constants, _parser  # private: what this test watches
    except ImportError as exc:  # pragma: no cover - only on a Python that moved them
        raise AssertionError(
            f"re._parser/re._constants moved ({exc}): the grep tool lost its required-literal prefilter "
            "(services/tools/grep.py, _required_literal); update it for this Python"
        ) from None
    missing = [
        name
        for name in ("LITERAL", "SUBPATTERN", "MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT", "ATOMIC_GROUP")
        if not hasattr(_constants, name)
    ]
    assert not missing, f"re._constants lost {missing}: update _required_literal in services/tools/grep.py"
    parsed = _parser.parse("(?i)x", 0)
    assert parsed.state.flags & re.IGNORECASE, "re._parser's parse(...).state.flags moved: update compile_pattern"
    assert compile_pattern(r"class \w+Error\(", True).literal == b"Error(", (
        "the grep prefilter no longer finds a required literal: re._parser's tree changed shape; "
        "update _required_literal in services/tools/grep.py"
    )


def test_eventsourcing_pool_hook_for_the_sqlite_synchronous_pragma(tmp_path):
    # runtime/sqlite_store.py: eventsourcing runs nothing public on each new connection.
    from eventsourcing.sqlite import SQLiteConnectionPool

    from autarch.runtime.sqlite_store import MODULE, SYNCHRONOUS_ENV
    from autarch.services.agent_runner.application import SessionApplication

    assert callable(getattr(SQLiteConnectionPool, "_create_connection", None)), (
        "eventsourcing's SQLiteConnectionPool._create_connection moved: sqlite_synchronous can no longer be "
        "applied; update Factory in runtime/sqlite_store.py (and the pin in pyproject.toml)"
    )
    env = {"PERSISTENCE_MODULE": MODULE, "SQLITE_DBNAME": str(tmp_path / "s.sqlite")}
    for level, expected in (("NORMAL", 1), ("OFF", 0), ("FULL", 2), ("", 1)):  # "": our default, NORMAL
        app = SessionApplication(env={**env, SYNCHRONOUS_ENV: level})
        try:
            with app.factory.datastore.transaction(commit=False) as cursor:
                cursor.execute("PRAGMA synchronous")
                assert cursor.fetchone()[0] == expected, f"PRAGMA synchronous is not applied for {level!r}"
        finally:
            app.close()


def test_eventsourcing_decorated_funcs_for_the_fast_replay():
    # runtime/aggregates.py load(): an @event method's event is replayed by calling the method directly.
    import eventsourcing.domain as domain

    from autarch.services.orchestrator.workflow.model import Workflow

    funcs = getattr(domain, "decorated_funcs", None)
    assert isinstance(funcs, dict), (
        "eventsourcing.domain.decorated_funcs moved: load() in runtime/aggregates.py can no longer find the "
        "@event methods; update it (and the pin in pyproject.toml)"
    )
    assert funcs.get(Workflow.ErrorRecorded) is not None, "decorated_funcs no longer maps event classes to methods"
    assert hasattr(domain, "DecoratedFuncCaller"), "eventsourcing.domain.DecoratedFuncCaller moved: update load()"


def test_eventsourcing_insert_steps_the_hash_chain_is_written_from():
    # runtime/sqlite_store.py and runtime/postgres_store.py write each event's link inside the inserting transaction.
    from eventsourcing.postgres import PostgresApplicationRecorder
    from eventsourcing.sqlite import SQLiteApplicationRecorder

    assert callable(getattr(SQLiteApplicationRecorder, "_insert_events", None)), (
        "eventsourcing's SQLiteApplicationRecorder._insert_events moved: the hash chain is not written; update "
        "ApplicationRecorder.insert_events in runtime/sqlite_store.py (and the pin in pyproject.toml)"
    )
    assert callable(getattr(PostgresApplicationRecorder, "_fetch_ids_after_insert_events", None)), (
        "eventsourcing's PostgresApplicationRecorder._fetch_ids_after_insert_events moved: events on PostgreSQL are "
        "recorded without their links; update runtime/postgres_store.py (and the pin in pyproject.toml)"
    )


def test_c_socket_accept_for_the_sandbox_egress_forwarder():
    # services/tools/egress_forward.py _serve(): the sandbox's forwarder uses the C ``_socket`` module (``socket``
    # would cost its import in every preflight command), whose socket accepts only through ``_accept``.
    import _socket

    assert callable(getattr(_socket.socket, "_accept", None)), (
        "_socket.socket._accept moved: the sandbox's egress forwarder can no longer accept a connection; "
        "update _serve in services/tools/egress_forward.py"
    )
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        client.connect(listener.getsockname())
        fd, _ = listener._accept()
        assert isinstance(fd, int), "_socket.socket._accept no longer answers (fd, address): update _serve"
        _socket.socket(fileno=fd).close()
        client.close()
    finally:
        listener.close()
