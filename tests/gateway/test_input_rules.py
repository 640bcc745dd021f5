"""Input rules at the door: each bad create, feedback or resume point is a typed 400 and reaches no service.

No orchestrator runs behind this gateway: a request that got past the door would be answered 503
``unavailable``, so a 400 here also proves nothing was asked (the e2e tests check nothing is recorded).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import httpx
import pytest

from autarch.contracts import subjects
from autarch.gateway.input_rules import MAX_SEQUENCE, branch_name_problem

from .conftest import Gateway, git_repo


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rules")
    good = git_repo(root / "good", {"a.txt": "a\n"})
    empty = root / "empty"
    empty.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=empty, check=True)
    plain = root / "plain"
    plain.mkdir()
    return {"good": good, "empty": empty, "plain": plain}


def body(repo: Path, **over: object) -> dict[str, object]:
    return {"title": "JWT", "request": "add JWT validation", "repo": str(repo), **over}


async def create(gateway: Gateway, payload: dict[str, object]) -> httpx.Response:
    async with gateway.client() as http:
        return await http.post("/api/workflows", json=payload)


def assert_bad(reply: httpx.Response, field: str) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()
    assert error["code"] == "bad_request" and error["message"], error
    assert field in error["message"] or field in str(error["details"]), error


@pytest.mark.parametrize(("repo", "field"), [("/", "repo"), ("plain", "repo"), ("empty", "repo"),
                                             ("/definitely/not/here", "repo")])
async def test_repo_must_be_a_git_work_tree_with_a_commit(gateway: Gateway, repos, repo, field):
    path = repos.get(repo, Path(repo))
    assert_bad(await create(gateway, body(path)), field)


async def test_repo_may_not_be_a_subdirectory_of_a_work_tree(gateway: Gateway, repos):
    sub = repos["good"] / "inner"
    sub.mkdir(exist_ok=True)
    assert_bad(await create(gateway, body(sub)), "repo")


async def test_the_data_dir_is_never_a_repository(gateway: Gateway, repos):
    # The gateway's data dir is a fresh directory of the fixture; make it a git repository to be sure
    # the refusal is for what it is, not for lacking .git.
    data = Path(gateway.data_dir)
    if not (data / "inner" / ".git").exists():
        git_repo(data / "inner", {"x": "x"})
    assert_bad(await create(gateway, body(data / "inner")), "data dir")


async def test_base_branch_must_exist(gateway: Gateway, repos):
    assert_bad(await create(gateway, body(repos["good"], base_branch="develop")), "base_branch")


@pytest.mark.parametrize("name", ["a..b", "--upload-pack=x", "refs/heads/x", "x.lock", ".hidden", "a b", "a~1",
                                  "a^", "a:b", "a?", "a*", "a[", "a\\b", "a//b", "a/", "/a", "a.", "a@{1}", "@",
                                  "HEAD", "a/.b", "x\n", "x\x7f"])
async def test_branch_names_follow_git_ref_format(gateway: Gateway, repos, name):
    assert branch_name_problem(name) is not None
    assert_bad(await create(gateway, body(repos["good"], branch=name)), "branch")


@pytest.mark.parametrize("name", ["feature/jwt", "autarch/1234abcd", "fix-1.2", "ünïcode", "a@b"])
def test_valid_branch_names_pass(name):
    assert branch_name_problem(name) is None


async def test_branch_may_not_be_the_base(gateway: Gateway, repos):
    assert_bad(await create(gateway, body(repos["good"], branch="main")), "branch")


@pytest.mark.parametrize(("field", "value"), [("title", "   "), ("title", "\t\n"), ("title", "a\x00b"),
                                              ("title", "\x1b[31mred"), ("title", "two\nlines"), ("title", "end\n"),
                                              ("title", "c1\x9bx"), ("request", " \n "), ("request", "x\x00"),
                                              ("request", "bell\x07")])
async def test_titles_and_requests_are_visible_text(gateway: Gateway, repos, field, value):
    assert_bad(await create(gateway, body(repos["good"], **{field: value})), field)


@pytest.mark.parametrize("feedback", ["", "   ", "\n\t", "x\x1b[2J"])
async def test_feedback_is_visible_text(gateway: Gateway, feedback):
    async with gateway.client() as http:
        reply = await http.post("/api/workflows/11111111-1111-4111-8111-111111111111/request-changes",
                                json={"feedback": feedback})
    assert_bad(reply, "feedback")


SESSION = "11111111-1111-4111-8111-111111111111"


@pytest.mark.parametrize(("path", "payload", "field"), [
    (f"/api/sessions/{SESSION}/stop", {"close": 0}, "close"),
    (f"/api/sessions/{SESSION}/stop", {"close": "true"}, "close"),
    ("/api/pulse/start", {"projectName": "shop", "projectPath": "/r/shop", "goal": "g", "maxIterations": "10"},
     "maxIterations"),
    ("/api/beads", {"epic_id": SESSION, "title": "x", "priority": "1"}, "priority"),
])
async def test_a_body_of_the_wrong_json_type_is_refused_not_coerced(gateway: Gateway, path, payload, field):
    # Litestar alone would convert 0 to false and "10" to 10; the document says these are wrong types.
    async with gateway.client() as http:
        reply = await http.post(path, json=payload)
    assert_bad(reply, field)


@pytest.mark.parametrize("path", ["/api/workflows", "/api/workflows/11111111-1111-4111-8111-111111111111/approve",
                                  "/api/workflows/11111111-1111-4111-8111-111111111111/request-changes",
                                  "/api/pulse/start", "/api/beads"])
async def test_invalid_utf8_is_a_typed_400(gateway: Gateway, path):
    async with gateway.client() as http:
        reply = await http.post(path, content=b'{"title": "\xff\xfe"}', headers={"Content-Type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == "bad_request"


@pytest.mark.parametrize("value", ["\u00b2", "١٢", "-1", "1.0", "1 2", "0x10", str(MAX_SEQUENCE + 1), "9" * 40])
async def test_last_event_id_is_an_ascii_sequence_in_range(gateway: Gateway, value):
    async with gateway.client() as http:
        reply = await http.get("/api/events", headers={"Last-Event-ID": value.encode()})
    assert_bad(reply, "Last-Event-ID")


@pytest.mark.parametrize("value", ["\u00b2", "-1", str(MAX_SEQUENCE + 1), str(2**64), "9" * 40])
async def test_since_is_a_sequence_in_range(gateway: Gateway, value):
    async with gateway.client() as http:
        reply = await http.get("/api/events", params={"since": value})
    assert_bad(reply, "since")


@pytest.mark.parametrize("how", ["since", "Last-Event-ID"])
async def test_a_resume_point_past_the_streams_last_sequence_is_a_400(gateway: Gateway, nc, how):
    last = (await nc.jetstream().stream_info(subjects.EVENTS_STREAM)).state.last_seq
    for beyond in (last + 1_000_000, MAX_SEQUENCE):
        async with gateway.client() as http:
            if how == "since":
                reply = await http.get("/api/events", params={"since": str(beyond)})
            else:
                reply = await http.get("/api/events", headers={"Last-Event-ID": str(beyond)})
        assert_bad(reply, how)
        assert reply.json()["details"]["last_sequence"] >= last
    # The last sequence itself is a valid resume point: the stream opens.
    async with gateway.client() as http:
        params = {"since": str(last), "deltas": "false"} if how == "since" else {"deltas": "false"}
        headers = {"Last-Event-ID": str(last)} if how == "Last-Event-ID" else {}
        async with http.stream("GET", "/api/events", params=params, headers=headers) as reply:
            assert reply.status_code == 200
            assert reply.headers["content-type"].startswith("text/event-stream")
            async for line in reply.aiter_lines():
                assert line == ": connected"
                break


async def test_401_names_the_bearer_scheme(gateway: Gateway):
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic abc"}):
            reply = await http.get("/api/workflows", headers=headers)
            assert reply.status_code == 401
            assert reply.headers["WWW-Authenticate"].startswith("Bearer ")
            assert reply.json()["code"] == "unauthorized"


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("DELETE", "/api/workflows", {"GET", "POST"}),
    ("PUT", "/api/workflows/11111111-1111-4111-8111-111111111111", {"GET"}),
    ("GET", "/api/workflows/11111111-1111-4111-8111-111111111111/approve", {"POST"}),
])
async def test_405_lists_the_allowed_methods(gateway: Gateway, method, path, allowed):
    async with gateway.client() as http:
        reply = await http.request(method, path)
    assert reply.status_code == 405
    assert allowed <= {m.strip() for m in reply.headers["Allow"].split(",")}
    assert reply.json()["code"] == "method_not_allowed"
