"""The scripted model's scenario for the runner's tests: one script per test, keyed ``<role>:<name>``."""

from __future__ import annotations

from typing import Any


def tool(name: str, **input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": input}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def step(*content: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"content": list(content), **fields}


RESEARCH_CARD = {
    "summary": "greet() in greeter/core.py concatenates a greeting.",
    "keyFiles": [{"path": "greeter/core.py", "purpose": "the greeting", "lineRanges": "1-3"}],
    "recommendations": ["Handle the empty name inside greet()"],
}

SCOPE = {
    "title": "Greet the world on an empty name",
    "description": "greet('') returns 'Hello, !'; make it 'Hello, world!'.",
    "in_scope": ["greet() handles an empty name"],
    "out_of_scope": ["Localisation"],
    "recommended_path": "quick",
}
OLD = 'return "Hello, " + name + "!"'
NEW = 'return "Hello, " + (name or "world") + "!"'
PULSE_DONE: dict[str, Any] = {"summary": "feat(greeter): greet the world on an empty name",
                              "filesChanged": ["greeter/core.py"]}
EXTEND = {"reason": "More to do", "completed": ["Read the code"], "remaining": ["Edit greet"]}
SLOW_TEXT = " ".join(f"word{n}" for n in range(60))

SCRIPTS: dict[str, list[Any]] = {
    "research:read-and-submit": [
        step(
            text("Let me read the code."),
            tool("read_file", reason="See how greetings are built", path="greeter/core.py"),
            tool("grep", reason="Find every caller of greet", pattern="greet"),
        ),
        step(
            {"type": "thinking", "thinking": "greet is simple; one caller in tests."},
            text("I have what I need."),
            tool("submit_research", **RESEARCH_CARD),
        ),
    ],
    "pulsing:edit-and-shell": [
        step(tool("read_file", reason="Read greet before changing it", path="greeter/core.py")),
        step(
            tool(
                "edit_file",
                reason="Fall back to 'world' for an empty name",
                path="greeter/core.py",
                oldString=OLD,
                newString=NEW,
            )
        ),
        step(
            tool(
                "shell",
                reason="Check the empty-name greeting",
                command="python3 -c \"from greeter.core import greet; print(greet(''))\"",
            )
        ),
        step(text("Done."), tool("complete_pulse", **PULSE_DONE)),
    ],
    "pulsing:two-blocks": [
        step(tool("complete_pulse", **PULSE_DONE), tool("request_extension", **EXTEND)),
        step(tool("request_extension", **EXTEND)),
    ],
    "scoping:not-last": [
        step(tool("submit_scope", **SCOPE), text("Hope this scope helps!")),
        step(tool("submit_scope", **SCOPE)),
    ],
    "scoping:slow-scope": [
        step(text(SLOW_TEXT), tool("submit_scope", **SCOPE), delay_ms=50),
    ],
    "scoping:not-alone": [
        step(tool("read_file", reason="Check greet once more", path="greeter/core.py"), tool("submit_scope", **SCOPE)),
        step(tool("submit_scope", **SCOPE)),
    ],
    "scoping:bad-args": [
        step(tool("submit_scope", title="Greet the world", recommended_path="sometimes")),
        step(tool("submit_scope", **SCOPE)),
    ],
    "pulsing:bad-input": [
        step(
            tool("read_file", reason="Read with a wrong argument type", path=123),
            tool("teleport", reason="A tool that does not exist", where="mars"),
            tool("read_file", reason="Read a very large file", path="big.txt"),
            tool("ask_questions", questions=[{"type": "free_text", "prompt": "Why?"}]),
        ),
        step(text("I could not read those; stopping here.")),
    ],
    "discussion:retry": [
        step(text("Answer after two refusals."), fail_first=[429, 529]),
    ],
    "discussion:mid-stream": [
        step(text("Answer after a stream that broke."), fail_first=[{"status": 529, "mid_stream": True}]),
    ],
    "discussion:slow": [
        step(text(SLOW_TEXT), delay_ms=100),
    ],
    "discussion:chat": [
        step(text("Hello there, this is greeter.")),
        step(text("Second answer.")),
    ],
    "discussion:two-replies": [
        step(text("Looking at the module."), tool("read_file", reason="Read the module", path="greeter/core.py")),
        step(text("It greets by name.")),
    ],
    "pulsing:slow-tool": [
        step(tool("shell", reason="A long check", command="sleep 5")),
        step(text("Understood.")),
    ],
    "scoping:two-turns": [
        step(
            tool(
                "ask_questions",
                questions=[{"type": "single_select", "prompt": "Which greeting?", "options": ["world", "friend"]}],
            )
        ),
        step(text("Thanks."), tool("submit_scope", **SCOPE)),
    ],
    "pulsing:crash": [
        step(tool("read_file", reason="Read greet before changing it", path="greeter/core.py")),
        step(
            tool(
                "edit_file",
                reason="Fall back to 'world' for an empty name",
                path="greeter/core.py",
                oldString=OLD,
                newString=NEW,
            )
        ),
        step(tool("shell", reason="Record that the check ran", command="sleep 1.5 && echo ran >> shell.log")),
        step(tool("read_file", reason="Read the README before documenting", path="README.md")),
        step(
            tool(
                "edit_file",
                reason="Document the empty-name greeting",
                path="README.md",
                oldString="A tiny greeting library.",
                newString="A tiny greeting library; greets the world.",
            )
        ),
        step(
            tool(
                "complete_pulse",
                summary="feat(greeter): greet the world on an empty name",
                filesChanged=["greeter/core.py", "README.md"],
            )
        ),
    ],
    "discussion:budget": [
        step(tool("read_file", reason="See what the project does", path="README.md")),
        step(text("Never reached.")),
    ],
}

# --- completion rules, baselines and research's yield (test_completion_rules.py) ------------------------

KNOWN_WARNING = "src/Legacy.cs(10,5): warning CS0618: 'Greeter.Old()' is obsolete"
NEW_ERROR = "src/Greeter.cs(3,9): error CS0103: The name 'nme' does not exist in the current context"
BUILD = "printf '%b\\nBuild FAILED.\\n    1 Warning(s)\\n' {lines} >&2; exit 1"
ISSUES = [{"issue": "fixed.flag is never created", "reason": "It comes from a deployment step outside this pulse"}]
CHECK = "test -f fixed.flag"


def complete_pulse(summary: str = PULSE_DONE["summary"], **extra: Any) -> dict[str, Any]:
    return step(tool("complete_pulse", summary=summary, filesChanged=["greeter/core.py"], **extra))


def _research_actions(n: int, first: int) -> list[dict[str, Any]]:
    return [tool("grep", reason=f"Look for greetings, pass {i}", pattern="greet") for i in range(first, first + n)]


SCRIPTS.update({
    "pulsing:baseline-only": [
        step(tool("shell", reason="Build the project", command=BUILD.format(lines=f'"{KNOWN_WARNING}"'))),
        complete_pulse(),
    ],
    "pulsing:baseline-plus-new": [
        step(tool("shell", reason="Build the project",
                  command=BUILD.format(lines=f'"{KNOWN_WARNING}\\n{NEW_ERROR}"'))),
        complete_pulse(),
        step(tool("request_extension", **EXTEND)),
    ],
    "pulsing:escape-hatch": [
        step(tool("shell", reason="Check the flag file exists", command=CHECK)),
        complete_pulse(unresolvedIssues=ISSUES),  # the hatch is not open: an argument error
        complete_pulse(),  # rejected once
        complete_pulse(),  # rejected twice: the hatch opens
        complete_pulse(unresolvedIssues=ISSUES),  # accepted
    ],
    "pulsing:hatch-not-needed": [
        step(tool("shell", reason="Check the flag file exists", command=CHECK)),
        complete_pulse(),
        complete_pulse(),  # the hatch opens
        step(tool("shell", reason="Create the flag file", command="touch fixed.flag")),
        step(tool("shell", reason="Check the flag file exists", command=CHECK)),
        complete_pulse(unresolvedIssues=ISSUES),  # nothing is unresolved any more: refused
        complete_pulse(),
    ],
    "pulsing:bad-summary": [
        complete_pulse(summary="Updated the greeting"),
        complete_pulse(summary="feature: greet the world"),
        complete_pulse(summary="fix(greeter)!: greet the world on an empty name\n\nBreaking: new default."),
    ],
    "research:over-the-limit": [
        step(*_research_actions(5, 0)),
        step(
            *_research_actions(3, 5),
            tool("take_note", reason="Keep what the search showed", note="greet lives in greeter/core.py"),
            tool("read_file", reason="One read too many", path="greeter/core.py"),
            tool("take_note", reason="Keep it after the limit", note="greet has one caller"),
        ),
        step(tool("request_extension", **EXTEND)),
        step(tool("read_file", reason="A new turn counts afresh", path="greeter/core.py")),
        step(tool("submit_research", **RESEARCH_CARD)),
    ],
})

# --- streaming retries, raw arguments, thinking, models, usage, notes (test_model_calls.py, test_notes.py) --

RETRIED_TEXT = " ".join(f"token{n}" for n in range(24))
TRUNCATED_ARGS = '{"reason": "Read greet", "path": "greeter/co'
NOTE = "greet() is only called from tests/test_core.py."
ROLE_NAMES = ("discussion", "scoping", "research", "plan", "preflight", "pulsing", "review")
CACHED_USAGE = [
    {"input_tokens": 120, "output_tokens": 30, "cache_creation_input_tokens": 2_000, "cache_read_input_tokens": 0},
    {"input_tokens": 180, "output_tokens": 12, "cache_creation_input_tokens": 40, "cache_read_input_tokens": 2_000},
]

SCRIPTS.update({
    "discussion:restart": [
        step(text("An answer streamed twice, shown once."), fail_first=[{"status": 529, "mid_stream": True}]),
    ],
    "discussion:mid-stream-slow": [
        step(text(RETRIED_TEXT), delay_ms=25, fail_first=[{"status": 529, "mid_stream": True}]),
    ],
    "pulsing:raw-args": [
        step(
            text("Reading greet."),
            {"type": "tool_use", "name": "read_file", "raw_input": TRUNCATED_ARGS},
            {"type": "tool_use", "name": "grep", "raw_input": '["greet"]'},
        ),
        step(tool("read_file", reason="Read greet, arguments fixed", path="greeter/core.py")),
        step(text("Read it on the second try.")),
    ],
    "research:think-and-read": [
        step(
            {"type": "thinking", "thinking": "The greeting is built in core.py; read it before anything else."},
            tool("read_file", reason="See how greetings are built", path="greeter/core.py"),
        ),
        step(text("greet() concatenates a greeting.")),
    ],
    **{f"{role}:hello": [step(text(f"Hello from {role}."))] for role in ROLE_NAMES},
    "discussion:cached": [
        step(tool("read_file", reason="See what the project does", path="README.md"), usage=CACHED_USAGE[0]),
        step(text("A tiny greeting library."), usage=CACHED_USAGE[1]),
    ],
    "discussion:server-error": [
        step(text("Answer after a server error."), fail_first=[500]),
    ],
    "research:note-taker": [
        step(tool("take_note", reason="Remember who calls greet", note=NOTE)),
        step(text("Noted.")),
        step(text("The note is in front of me.")),
    ],
})

SCENARIO: dict[str, Any] = {
    "description": "The agent runner's integration tests.",
    "check_tools": False,
    "scripts": SCRIPTS,
}
