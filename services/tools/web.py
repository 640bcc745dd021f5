"""``web_code_search``: Exa's code-context API over HTTP (``POST <base>/context``, ``x-api-key``)."""

from __future__ import annotations

from typing import Any

from autarch.contracts.tool_args import WebCodeSearchArgs

from .context import ToolContext

__all__ = ["ERROR_PREFIX", "web_code_search"]

ERROR_PREFIX = "There was an error searching the web for code: "
_TIMEOUT_SECONDS = 30.0


async def web_code_search(ctx: ToolContext, args: WebCodeSearchArgs) -> Any:
    key = ctx.settings.exa_api_key
    if not key:
        return {"error": ERROR_PREFIX + "no Exa API key is configured (set AUTARCH_EXA_API_KEY)"}
    import httpx  # the tools extra; imported here so the rest of the service works without it

    url = ctx.settings.exa_base_url.rstrip("/") + "/context"
    redactor = ctx.redactor.with_literals([key])
    try:
        async with httpx.AsyncClient(timeout=_TIMEOUT_SECONDS) as client:
            response = await client.post(
                url,
                json={"query": args.query, "tokensNum": "dynamic"},
                headers={"x-api-key": key, "accept": "application/json"},
            )
    except httpx.HTTPError as exc:
        return {"error": ERROR_PREFIX + redactor.redact(f"{type(exc).__name__}: {exc}")}
    if response.status_code != 200:
        detail = redactor.redact(response.text[:300].strip())
        return {"error": ERROR_PREFIX + f"HTTP {response.status_code}: {detail}"}
    try:
        body = response.json()
    except ValueError:
        return {"error": ERROR_PREFIX + "the answer was not JSON"}
    text = body.get("response") if isinstance(body, dict) else None
    if not isinstance(text, str):
        return {"error": ERROR_PREFIX + "the answer has no 'response' text"}
    return redactor.redact(text)
