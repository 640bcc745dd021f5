"""What the model-ending tests of workflows and loops share: tool steps, a reply cut or paused or refused, and big
files whose reads outgrow a context window the scripted model enforces (sized from the role's fixed prompt)."""

from __future__ import annotations

from typing import Any

import msgspec

from autarch.runtime.settings import Settings
from autarch.services.agent_runner.agents import AgentRegistry
from autarch.services.scripted_model.protocol import estimate_tokens

LINES = 600
REFUSED_WORDS = "I will not go on with this change"
EXPLANATION = "This request was declined because it could enable cyber harm."


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": arguments}


def step(*content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"content": list(content), **fields}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def cut(block: dict[str, Any]) -> dict[str, Any]:
    """A reply whose ``max_tokens`` ran out while it wrote ``block``'s arguments."""
    return step(text("Writing the change."), block, stop_reason="max_tokens")


def paused(words: str) -> dict[str, Any]:
    return step(text(words), stop_reason="pause_turn")


def refused() -> dict[str, Any]:
    return step(text(REFUSED_WORDS), stop_reason="refusal",
                stop_details={"category": "cyber", "explanation": EXPLANATION})


def malformed(name: str) -> dict[str, Any]:
    """A call whose arguments arrive as JSON cut short (not an object)."""
    return step({"type": "tool_use", "name": name, "raw_input": '{"reason": "Write it", "path": "gre'})


def big_file(n: int) -> str:
    return "".join(f"part {n} line {i}: the module keeps its helpers and their long explanations here\n"
                   for i in range(LINES))


def result_tokens() -> int:
    """What one read of a :func:`big_file` adds to a request, as the scripted model counts it (some 10k tokens)."""
    numbered = "\n".join(f"{i:>6}\t{line}" for i, line in enumerate(big_file(0).splitlines(), 1))
    return estimate_tokens(msgspec.json.encode(numbered))


def fixed_tokens(role: str) -> int:
    """The system prompt and tool definitions of a ``role`` request, as the scripted model counts them."""
    agent = AgentRegistry(settings=Settings(data_dir="/tmp/unused")).get(role)
    return estimate_tokens(msgspec.json.encode(agent.system) + msgspec.json.encode(agent.tools))


def window(role: str) -> int:
    """Room for three reads of a big file and the rest of a short turn, not four."""
    return fixed_tokens(role) + int(3.5 * result_tokens())


def reads(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` steps, each reading one big file."""
    return [step(call("read_file", reason=f"Read part {n}", path=f"parts/part{n}.txt"))
            for n in range(first, first + count)]


def reads_at_once(count: int) -> dict[str, Any]:
    """One step reading ``count`` big files."""
    return step(*(call("read_file", reason=f"Read part {n}", path=f"parts/part{n}.txt") for n in range(count)))


BIG_FILES = {f"parts/part{n}.txt": big_file(n) for n in range(4)}
