"""The OpenAPI document lists every route with a summary, a description, tags and its error answers."""

from __future__ import annotations

from .conftest import Gateway

NEW_ROUTES = {
    ("/api/workflows/{workflow_id}/stop", "post"): "workflows",
    ("/api/workflows/{workflow_id}/resume", "post"): "workflows",
    ("/api/workflows/{workflow_id}/extension/approve", "post"): "workflows",
    ("/api/workflows/{workflow_id}/answers", "post"): "workflows",
    ("/api/workflows/{workflow_id}/abandon", "post"): "workflows",
    ("/api/channels/{channel_id}/session", "post"): "sessions",
    ("/api/sessions/{session_id}/message", "post"): "sessions",
    ("/api/sessions/{session_id}", "get"): "sessions",
    ("/api/sessions", "get"): "sessions",
    ("/api/sessions/{session_id}/stop", "post"): "sessions",
    ("/api/workflows/{workflow_id}/diff", "get"): "workflows",
    ("/api/workflows/{workflow_id}/pulses/{pulse_id}/diff", "get"): "workflows",
    ("/api/workflows/costs", "post"): "workflows",
}


async def test_every_route_is_documented(gateway: Gateway):
    async with gateway.client() as http:
        r = await http.get("/schema/openapi.json")
        assert r.status_code == 200
        schema = r.json()
    for (path, method), tag in NEW_ROUTES.items():
        operation = schema["paths"][path][method]
        assert operation["summary"] and len(operation["description"]) > 40, (path, method)
        assert operation["tags"] == [tag]
        assert {"401", "503", "504"} <= set(operation["responses"]), (path, method)
        assert operation["responses"]["401"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorReply"}
    # Every route, old and new, has a summary and a description.
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            assert operation.get("summary") and operation.get("description"), (path, method)
    bodies = schema["components"]["schemas"]
    assert {"StopBody", "ResumeBody", "ApproveExtensionBody", "AnswerQuestionsBody", "ChannelSessionBody",
            "SessionMessageBody", "StopSessionBody", "TurnAccepted", "SessionView", "SessionList",
            "SessionStopped", "DiffArtifact", "DiffArtifactRef", "WorkflowCostsBody", "WorkflowCostList"} <= set(bodies)
    costs = schema["paths"]["/api/workflows/costs"]["post"]
    assert costs["responses"]["400"] and costs["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WorkflowCostsBody"}
    assert schema["paths"]["/api/channels/{channel_id}/session"]["post"]["responses"]["201"]
    assert schema["paths"]["/api/sessions/{session_id}/message"]["post"]["responses"]["202"]
    for path in ("/api/workflows/{workflow_id}/diff", "/api/workflows/{workflow_id}/pulses/{pulse_id}/diff"):
        operation = schema["paths"][path]["get"]
        assert "no_branch" in operation["responses"]["404"]["description"]
        assert {p["name"] for p in operation["parameters"] if p["in"] == "query"} == {"offset", "limit"}
    events = schema["paths"]["/api/events"]["get"]
    deltas = next(p for p in events["parameters"] if p["name"] == "deltas")
    assert (deltas["in"], deltas["schema"]["type"]) == ("query", "boolean") and "turn:message_delta" in deltas[
        "description"]


async def test_the_document_tells_the_truth(gateway: Gateway):
    async with gateway.client() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": "The token in `<data dir>/token` (created at first start)."}
    assert schema["security"] == [{"bearer": []}]
    assert schema["paths"]["/healthz"]["get"]["security"] == []
    error = {"$ref": "#/components/schemas/ErrorReply"}
    for path, methods in schema["paths"].items():
        for method, operation in methods.items():
            for status, response in operation["responses"].items():
                for media in response.get("content", {}).values():
                    # No reply is documented as "anything" (Litestar's oneOf: [X, {}]).
                    assert {} not in media["schema"].get("oneOf", []), (path, method, status)
                if int(status) >= 400 and path != "/healthz":
                    assert response["content"]["application/json"]["schema"] == error, (path, method, status)
            if operation.get("security") == []:
                # Public: the health check, and the action links whose signed token is their own credential (an
                # unknown token is not a 404 but a link_malformed or link_forged).
                assert path in ("/healthz", "/act/{token}"), path
                continue
            assert "401" in operation["responses"] and "WWW-Authenticate" in operation["responses"]["401"]["headers"]
            if "{" in path:
                assert "404" in operation["responses"], (path, method)
    # A degraded health is a 503 with the Health body, not an ErrorReply.
    assert schema["paths"]["/healthz"]["get"]["responses"]["503"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Health"}
    assert schema["components"]["schemas"]["ErrorReply"]["required"] == ["code", "message"]
    assert schema["components"]["schemas"]["CreateWorkflowBody"]["additionalProperties"] is False
    # Optional bodies are optional; required ones required.
    assert schema["paths"]["/api/workflows/{workflow_id}/approve"]["post"]["requestBody"]["required"] is False
    assert schema["paths"]["/api/workflows"]["post"]["requestBody"]["required"] is True
    events = schema["paths"]["/api/events"]["get"]
    assert "text/event-stream" in events["responses"]["200"]["content"]
    assert {"Last-Event-ID", "since", "workflow"} <= {p["name"] for p in events["parameters"]}
    assert {"bearer": []} in events["security"] and {"accessToken": []} in events["security"]


async def test_options_allow_lists_every_method_of_the_path(gateway: Gateway):
    async with gateway.client() as http:
        reply = await http.options("/api/workflows")
    assert {m.strip() for m in reply.headers["allow"].split(",")} == {"GET", "POST", "OPTIONS"}


async def test_creations_link_to_the_operations_that_take_what_they_created(gateway: Gateway):
    async with gateway.client() as http:
        schema = (await http.get("/schema/openapi.json")).json()
    operations = {op["operationId"]: (path, method) for path, methods in schema["paths"].items()
                  for method, op in methods.items()}
    workflow = schema["paths"]["/api/workflows"]["post"]["responses"]["201"]["links"]
    linked = {operations[link["operationId"]] for link in workflow.values()}
    assert ("/api/workflows/{workflow_id}", "get") in linked
    assert ("/api/workflows/{workflow_id}/approve", "post") in linked
    assert all("{workflow_id}" in path for path, _ in linked)
    assert all(link["parameters"] == {"path.workflow_id": "$response.body#/id"} for link in workflow.values())
    bead = schema["paths"]["/api/beads"]["post"]["responses"]["201"]["links"]
    assert {operations[link["operationId"]] for link in bead.values()} >= {
        ("/api/beads/{epic_id}/{bead_id}", "get"), ("/api/beads/{epic_id}/{bead_id}", "patch"),
        ("/api/beads/{epic_id}/{bead_id}/close", "post")}
    assert all(link["parameters"] == {"path.epic_id": "$response.body#/epic_id", "path.bead_id": "$response.body#/id"}
               for link in bead.values())


async def test_the_swagger_page_embeds_the_corrected_document(gateway: Gateway):
    # The page and /schema/openapi.json are two render plugins over one corrected document: the bearer scheme
    # (which Litestar's generated document does not have) is in both.
    async with gateway.client() as http:
        document = (await http.get("/schema/openapi.json")).json()
        page = await http.get("/schema/swagger")
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert page.status_code == 200 and '"securitySchemes"' in page.text and '"accessToken"' in page.text
