"""Bad starts are typed errors that create nothing: no session, no branch, no worktree."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from autarch.contracts.loops import ListLoops, LoopList, LoopView, StartLoop


def start_payload(repo, **fields) -> dict:
    return {"session_id": str(uuid.uuid4()), "project_name": "shop", "project_path": str(repo),
            "goal": "Add a health endpoint", **fields}


@pytest.mark.parametrize(("fields", "code", "words"), [
    ({"goal": ""}, "bad_request", "goal"),
    ({"goal": "   "}, "bad_request", "goal"),
    ({"max_iterations": 0}, "bad_request", "max_iterations"),
    ({"max_iterations": -3}, "bad_request", "max_iterations"),
    ({"max_iterations": 10**9}, "bad_request", "max_iterations"),
    ({"max_iterations": 500}, "bad_request", "loop_max_iterations_limit"),
    ({"project_path": "relative/path"}, "bad_request", "project_path"),
    ({"project_path": "/nonexistent/autarch/repo"}, "not_a_repository", "/nonexistent/autarch/repo"),
    ({"branch_name": "a..b"}, "invalid_branch_name", "a..b"),
    ({"branch_name": "main"}, "branch_exists", "main"),
    ({"base_branch": "nope"}, "base_branch_missing", "nope"),
    ({"notify": [{"kind": "telegram"}]}, "bad_request", "chatId"),
    ({"notify": [{"kind": "sms"}]}, "bad_request", "phoneNumber"),
    ({"notify": [{"kind": "sms", "phoneNumber": "5551234"}]}, "bad_request", "notify"),
    ({"notify": [{"kind": "discord"}]}, "bad_request", "discordThreadId"),
    ({"notify": [{"kind": "discord", "discordThreadId": "12ab"}]}, "bad_request", "notify"),
    ({"notify": [{"kind": "webhook", "url": "ftp://x"}]}, "bad_request", "notify"),
    ({"context_strategy": "psychic"}, "bad_request", "context_strategy"),
])
def test_a_bad_start_is_refused_and_creates_nothing(loops, fields, code, words):
    repo = loops.repo("bad")
    before = loops.ask("list_loops", ListLoops(), LoopList).total
    payload = start_payload(repo, **fields)
    refused = loops.ask_raw_error("start_loop", payload)
    assert refused.code == code, refused.message
    assert words in refused.message or words in str(refused.reply.details), refused.message
    assert loops.ask("list_loops", ListLoops(), LoopList).total == before
    branches = subprocess.run(["git", "-C", str(repo), "branch", "--format=%(refname:short)"], check=True,
                              capture_output=True, text=True).stdout.split()
    assert branches == ["main"]


def test_a_directory_that_is_not_a_repository(loops, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    refused = loops.ask_raw_error("start_loop", start_payload(plain))
    assert refused.code == "not_a_repository"


def test_an_unknown_anchor_is_refused_at_start(loops):
    refused = loops.ask_raw_error("start_loop", start_payload(loops.repo("anchor"), anchor_turn_id="no-such-turn"))
    # Without an indexer in this system the anchor cannot be checked: that is said, not silently ignored.
    assert refused.code in ("unknown_anchor", "turn_memory_unavailable")
    assert "no-such-turn" in refused.message


def test_a_repeated_start_is_one_session_and_other_fields_conflict(loops, model):
    model.use({"files": {"README.md": "# shop\n"}, "scripts": {"loop:again.i1": ["<signal>COMPLETE</signal>"]}})
    repo = loops.repo("again")
    before = loops.ask("list_loops", ListLoops(), LoopList).total
    command = StartLoop(**start_payload(repo, script="again", max_iterations=1))
    first = loops.ask("start_loop", command, LoopView)
    again = loops.ask("start_loop", command, LoopView)
    assert again.id == first.id
    assert loops.ask("list_loops", ListLoops(), LoopList).total == before + 1
    other = loops.ask_raw_error("start_loop", {**start_payload(repo), "session_id": first.id, "goal": "Another"})
    assert other.code == "conflict"
