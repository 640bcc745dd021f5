"""``/stop``, ``/resume``, ``/extension/approve``, ``/answers``: validation, the command sent, each error code."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from autarch.contracts.execution import AnswerQuestions, ApproveExtension, ResumeWorkflow, StopWorkflow
from autarch.contracts.workflows import WorkflowErrorCode

from .conftest import BROKEN, ECHO, KNOWN, NOT_HALTED, SLOW, WRONG_HALT, Gateway, new_id

ROUTES = ("stop", "resume", "extension/approve", "answers")
VALID = {"stop": None, "resume": None, "extension/approve": None, "answers": {"answers": ["yes"]}}


async def test_each_control_sends_its_command_and_answers_the_workflow(gateway: Gateway, orchestrator):
    async with gateway.client() as http:
        r = await http.post(f"/api/workflows/{KNOWN}/stop")
        assert r.status_code == 200 and (r.json()["id"], r.json()["status"]) == (KNOWN, "halted")
        r = await http.post(f"/api/workflows/{KNOWN}/stop", json={"reason": "lunch"})
        assert r.status_code == 200
        r = await http.post(f"/api/workflows/{KNOWN}/resume")
        assert r.status_code == 200 and r.json()["status"] == "active"
        r = await http.post(f"/api/workflows/{KNOWN}/resume", json={"message": "use the helper"})
        assert r.status_code == 200
        r = await http.post(f"/api/workflows/{KNOWN}/extension/approve", json={})
        assert r.status_code == 200
        r = await http.post(f"/api/workflows/{KNOWN}/extension/approve", json={"message": "go on"})
        assert r.status_code == 200
        r = await http.post(f"/api/workflows/{KNOWN}/answers", json={"answers": ["Postgres", "both"]})
        assert r.status_code == 200
        # Upper-case ids name the same workflow.
        r = await http.post(f"/api/workflows/{KNOWN.upper()}/resume")
        assert r.status_code == 200
    assert orchestrator.received == [
        StopWorkflow(workflow_id=KNOWN),
        StopWorkflow(workflow_id=KNOWN, reason="lunch"),
        ResumeWorkflow(workflow_id=KNOWN),
        ResumeWorkflow(workflow_id=KNOWN, message="use the helper"),
        ApproveExtension(workflow_id=KNOWN),
        ApproveExtension(workflow_id=KNOWN, message="go on"),
        AnswerQuestions(workflow_id=KNOWN, answers=["Postgres", "both"]),
        ResumeWorkflow(workflow_id=KNOWN),
    ]


@pytest.mark.parametrize("route", ROUTES)
async def test_unknown_and_malformed_ids_are_404(gateway: Gateway, orchestrator, route: str):
    async with gateway.client() as http:
        for wf in (new_id(), "not-a-uuid", "1234"):
            r = await http.post(f"/api/workflows/{wf}/{route}", json=VALID[route])
            assert (r.status_code, r.json()["code"]) == (404, "not_found"), (wf, r.text)
            assert wf in r.json()["message"]
    # Malformed ids never reach the orchestrator.
    assert len(orchestrator.received) == 1


@pytest.mark.parametrize("route", ROUTES)
async def test_a_workflow_in_another_state_is_409_with_the_precise_code(gateway: Gateway, orchestrator, route: str):
    async with gateway.client() as http:
        r = await http.post(f"/api/workflows/{NOT_HALTED}/{route}", json=VALID[route])
        assert (r.status_code, r.json()["code"]) == (409, "not_halted")
        assert r.json()["details"] == {"status": "active"}
        r = await http.post(f"/api/workflows/{WRONG_HALT}/{route}", json=VALID[route])
        assert (r.status_code, r.json()["code"]) == (409, "wrong_halt")
        r = await http.post(f"/api/workflows/{BROKEN}/{route}", json=VALID[route])
        assert (r.status_code, r.json()["code"]) == (500, "surprise")


async def test_every_lifecycle_conflict_code_is_409(gateway: Gateway, orchestrator):
    assert {"not_halted", "wrong_halt", "not_running", "finished"} <= WorkflowErrorCode.CONFLICTS
    async with gateway.client() as http:
        for code in sorted(WorkflowErrorCode.CONFLICTS):
            r = await http.post(f"/api/workflows/{ECHO}/stop", json={"reason": code})
            assert (r.status_code, r.json()["code"]) == (409, code)
        for code, status in (("invalid_plan", 400), ("not_found", 404), ("bad_request", 400), ("internal", 500)):
            r = await http.post(f"/api/workflows/{ECHO}/stop", json={"reason": code})
            assert (r.status_code, r.json()["code"]) == (status, code)


INVISIBLE = ["", " ", "\n\t ", "red \x1b[31m", "nul \x00", "csi \x9b1m", "bell \x07"]
"""Text the visible-text rule refuses: blank, or holding a control character other than tab and newlines."""

BAD_BODIES: dict[str, list[Any]] = {
    "stop": [{"reason": 5}, {"reason": "x", "extra": 1}, {"why": "x"}, [1], "stop", {"reason": "x" * 10_001},
             *({"reason": text} for text in INVISIBLE)],
    "resume": [{"message": 5}, {"message": "x", "extra": 1}, {"text": "x"}, [1], 3,
               *({"message": text} for text in INVISIBLE)],
    "extension/approve": [{"message": ["x"]}, {"extra": 1}, [1], True, *({"message": text} for text in INVISIBLE)],
    "answers": [None, {}, {"answers": []}, {"answers": [""]}, {"answers": "yes"}, {"answers": [1]},
                *({"answers": ["fine", text]} for text in INVISIBLE),
                {"answers": ["a"], "extra": 1}, {"answer": ["a"]}, ["a"]],
}


@pytest.mark.parametrize("route", ROUTES)
async def test_malformed_bodies_are_400_and_never_sent(gateway: Gateway, orchestrator, route: str):
    async with gateway.client() as http:
        for body in BAD_BODIES[route]:
            r = await http.post(f"/api/workflows/{KNOWN}/{route}", json=body)
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (body, r.text)
            assert set(r.json()) == {"code", "message", "details"}
        for raw in (b"{not json", b'{"answers": ["a"]', b"\xff"):
            r = await http.post(f"/api/workflows/{KNOWN}/{route}", content=raw,
                                headers={"Content-Type": "application/json"})
            assert (r.status_code, r.json()["code"]) == (400, "bad_request"), (raw, r.text)
    assert orchestrator.received == []


@pytest.mark.parametrize("route", ROUTES)
async def test_a_missing_or_wrong_token_is_401(gateway: Gateway, orchestrator, route: str):
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": gateway.token}):
            r = await http.post(f"/api/workflows/{KNOWN}/{route}", json=VALID[route], headers=headers)
            assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
        # The query-string token is only for the SSE route.
        r = await http.post(f"/api/workflows/{KNOWN}/{route}?access_token={gateway.token}", json=VALID[route])
        assert r.status_code == 401
    assert orchestrator.received == []


async def test_no_orchestrator_is_503(gateway: Gateway):
    async with gateway.client() as http:
        for route in ROUTES:
            r = await http.post(f"/api/workflows/{KNOWN}/{route}", json=VALID[route])
            assert (r.status_code, r.json()["code"]) == (503, "unavailable"), r.text


async def test_a_slow_orchestrator_is_504_and_not_retried(gateway: Gateway, orchestrator):
    async with gateway.client() as http:
        r = await http.post(f"/api/workflows/{SLOW}/resume")
    assert (r.status_code, r.json()["code"]) == (504, "timeout")
    assert len(orchestrator.received) == 1
