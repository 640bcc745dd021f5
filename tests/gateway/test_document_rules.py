"""The API document states every rule the server applies to the bodies that create things (``POST /api/workflows``,
``/api/pulse/start``, ``/api/channels/{id}/session``, ``/api/beads``): a value the document allows is one the
server takes, and each refusal is one the document makes.

Checked against the document the gateway serves, with a JSON Schema validator: the decoder's rules (text patterns,
lengths), git's rules for branch names (the git service's own check), the address each notify kind needs (the
orchestrator's ``missing_address``), the installation's iteration limit, and integers written ``2.0``.
"""

from __future__ import annotations

import re
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autarch.contracts.beads import CreateBeadBody
from autarch.contracts.http import ChannelSessionBody, CreateWorkflowBody
from autarch.contracts.loops import NotifyTarget, StartLoopBody, missing_address
from autarch.gateway.input_rules import branch_name_problem
from autarch.services.git.refs import BranchNameError, validate_branch_name

from .conftest import Gateway

EPIC = "7b000000-0000-4000-8000-0000000000e1"
BODIES: dict[str, tuple[type, dict[str, Any]]] = {
    "CreateWorkflowBody": (CreateWorkflowBody, {"title": "JWT", "request": "add JWT", "repo": "/r"}),
    "StartLoopBody": (StartLoopBody, {"projectName": "shop", "projectPath": "/r/shop", "goal": "Write a"}),
    "ChannelSessionBody": (ChannelSessionBody, {"repo": "/r", "message": "What is this?"}),
    "CreateBeadBody": (CreateBeadBody, {"epic_id": EPIC, "title": "Tidy"}),
}
TEXT_FIELDS: dict[str, list[str]] = {
    "CreateWorkflowBody": ["title", "request", "repo", "branch", "base_branch"],
    "StartLoopBody": ["projectName", "projectPath", "goal", "branchName", "baseBranch", "anchorTurnId"],
    "ChannelSessionBody": ["repo", "message"],
    "CreateBeadBody": ["title", "description", "verification_evidence"],
}
LIST_FIELDS = {"CreateBeadBody": ["files", "verify", "decision_refs", "learning_refs"]}
_PIECES = [*"ab/.-_ @{}~:\\*[", "\x00", "\x1b", "\t", "\n", "\r", "\x7f", "\x85", "\u2028", "é", "HEAD", "refs/",
           ".lock", ".."]
NASTY = st.lists(st.sampled_from(_PIECES), max_size=8).map("".join)
"""Short strings made of what the rules are about: controls, blanks, git's forbidden characters and sequences."""


@pytest.fixture(scope="module")
async def document(gateway: Gateway) -> dict[str, Any]:
    async with gateway.client() as http:
        return (await http.get("/schema/openapi.json")).json()


def _validator(document: dict[str, Any], component: str) -> jsonschema.Draft202012Validator:
    schema = {"components": document["components"], "$ref": f"#/components/schemas/{component}"}
    return jsonschema.Draft202012Validator(schema)


def _decodes(kind: type, body: dict[str, Any]) -> bool:
    try:
        msgspec.json.decode(msgspec.json.encode(body), type=kind, strict=True)
    except msgspec.ValidationError:
        return False
    return True


@pytest.mark.parametrize("component", sorted(BODIES))
def test_the_document_allows_exactly_what_the_decoder_takes(document, component):
    kind, base = BODIES[component]
    validator = _validator(document, component)

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
    @given(field=st.sampled_from(TEXT_FIELDS[component] + LIST_FIELDS.get(component, [])), value=NASTY)
    def agree(field: str, value: str) -> None:
        body = {**base, field: [value] if field in LIST_FIELDS.get(component, []) else value}
        assert validator.is_valid(body) == _decodes(kind, body), (field, value)

    agree()


@settings(max_examples=400, deadline=None, derandomize=True)
@given(name=NASTY.filter(bool))
def test_a_workflow_branch_the_document_allows_is_one_the_gateway_and_git_take(name: str) -> None:
    pattern = re.compile(msgspec.json.schema(CreateWorkflowBody)["$defs"]["CreateWorkflowBody"]["properties"][
        "branch"]["anyOf"][0]["pattern"])
    assert bool(pattern.match(name)) == (branch_name_problem(name) is None and _git_takes(name)), name


@settings(max_examples=400, deadline=None, derandomize=True)
@given(name=st.lists(st.sampled_from([*"aZ09._/-", "HEAD", ".lock", ".."]), min_size=1, max_size=10).map("".join))
def test_a_loop_branch_the_document_allows_is_one_git_takes(name: str) -> None:
    pattern = re.compile(msgspec.json.schema(StartLoopBody)["$defs"]["StartLoopBody"]["properties"][
        "branchName"]["anyOf"][0]["pattern"])
    if pattern.match(name):
        assert _git_takes(name), name
    elif re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", name):
        # Within the loop's own characters, the only names refused are the ones git refuses.
        assert not _git_takes(name) or name.endswith((".", "/")), name


def _git_takes(name: str) -> bool:
    try:
        validate_branch_name(name)
    except BranchNameError:
        return False
    return True


ADDRESSES = {"url": "https://hooks.example/x", "chatId": "-100123", "discordThreadId": "1234567890",
             "phoneNumber": "+15551234567"}


@pytest.mark.parametrize("kind", ["webhook", "slack", "discord", "telegram", "sms"])
def test_each_notify_kind_needs_its_address_in_the_document_as_at_the_orchestrator(document, kind):
    validator = _validator(document, "StartLoopBody")
    base = BODIES["StartLoopBody"][1]
    for mask in range(16):
        target = {"kind": kind, **{k: v for n, (k, v) in enumerate(ADDRESSES.items()) if mask >> n & 1}}
        decoded = msgspec.convert(target, NotifyTarget)
        refused_by_orchestrator = missing_address(decoded) is not None
        assert validator.is_valid({**base, "notify": [target]}) != refused_by_orchestrator, target


def test_the_iteration_limit_of_the_installation_is_the_documents_maximum(document):
    field = document["components"]["schemas"]["StartLoopBody"]["properties"]["maxIterations"]
    assert field["maximum"] == 200  # the default loop_max_iterations_limit the orchestrator enforces
    validator = _validator(document, "StartLoopBody")
    base = BODIES["StartLoopBody"][1]
    assert validator.is_valid({**base, "maxIterations": 200})
    assert not validator.is_valid({**base, "maxIterations": 201})


async def test_an_integer_written_with_a_zero_fraction_is_an_integer(gateway: Gateway):
    # JSON Schema's "integer" takes 2.0; the decoder takes it too (2.5 stays a 400). Nobody answers create_bead
    # here, so a body that passes the door is a 503.
    async with gateway.client() as http:
        whole = await http.post("/api/beads", json={"epic_id": EPIC, "title": "Tidy", "priority": 2.0})
        half = await http.post("/api/beads", json={"epic_id": EPIC, "title": "Tidy", "priority": 2.5})
    assert whole.status_code != 400, whole.text
    assert half.status_code == 400 and "$.priority" in half.text
