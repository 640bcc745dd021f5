"""Variations of the demo scenario, one per workflow path the tests walk."""

from __future__ import annotations

import copy
from typing import Any

from .conftest import demo_scenario


def tool(name: str, **arguments: Any) -> dict[str, Any]:
    return {"content": [{"type": "tool_use", "name": name, "input": arguments}]}


READ_CORE = tool("read_file", reason="Read greet", path="greeter/core.py")
EDIT_CORE = tool("edit_file", reason="Greet the world on an empty name", path="greeter/core.py",
                 oldString='    return "Hello, " + name + "!"\n',
                 newString='    if not name:\n        name = "world"\n    return "Hello, " + name + "!"\n')
FAILING_CHECK = tool("shell", reason="Run the checks", command="echo 'check failed: flaky network' >&2; exit 3")


def complete(summary: str = "feat(greeter): greet the world when the name is empty", **extra: Any) -> dict:
    return tool("complete_pulse", summary=summary, filesChanged=["greeter/core.py"], **extra)


def base() -> dict[str, Any]:
    return copy.deepcopy(demo_scenario())


def revising_every_card() -> dict[str, Any]:
    """Each stage's agent answers a change request with a revised card (the step after its first block)."""
    s = base()
    scripts = s["scripts"]
    scope = copy.deepcopy(scripts["scoping"][1])
    scope["content"][-1]["input"]["title"] = "Greet the world on an empty or missing name"
    scripts["scoping"][2] = {"content": [scope["content"][-1]]}
    research = copy.deepcopy(scripts["research"][3])
    research["content"][-1]["input"]["summary"] += " Revised: greet has no other callers."
    scripts["research"][4] = {"content": [research["content"][-1]]}
    plan = copy.deepcopy(scripts["plan"][1])
    plan["content"][-1]["input"]["approachSummary"] = "Revised: change greet, then test it."
    scripts["plan"][2] = {"content": [plan["content"][-1]]}
    scripts["review"][3] = tool("complete_review", reason="Record the revised verdict", recommendation="approve",
                                summary="Revised: the change matches the scope and is tested.")
    return s


def failing_preflight() -> dict[str, Any]:
    s = base()
    s["scripts"]["preflight"][1] = tool("complete_preflight", summary="The package does not import.",
                                        setupCommands=["python3 -c 'import greeter.core'"], buildSuccess=False,
                                        baselinesRecorded=0)
    return s


def hanging_preflight() -> dict[str, Any]:
    s = base()
    s["scripts"]["preflight"][0] = tool("shell", reason="Install dependencies", command="sleep 120")
    return s


def pulse_hits_the_iteration_limit() -> dict[str, Any]:
    """pulse-1 edits, its check keeps failing and it keeps claiming completion until the step limit ends it;
    attempt 2 (script ``pulsing``) is clean."""
    s = base()
    s["scripts"]["pulsing:pulse-1"] = [READ_CORE, EDIT_CORE, FAILING_CHECK, *[complete() for _ in range(12)]]
    return s


def pulse_with_unresolved_issues() -> dict[str, Any]:
    s = base()
    issue = [{"issue": "The network check fails", "reason": "The sandbox has no network; not caused by this pulse"}]
    s["scripts"]["pulsing:pulse-1"] = [READ_CORE, EDIT_CORE, FAILING_CHECK, complete(), complete(),
                                       complete(unresolvedIssues=issue), "Done."]  # refused twice, then accepted
    return s


def pulse_asks_for_an_extension() -> dict[str, Any]:
    s = base()
    good = s["scripts"]["pulsing"]
    extension = tool("request_extension", reason="The check still has to run", completed=["Read greet"],
                     remaining=["Edit greet", "Verify it"])
    s["scripts"]["pulsing:pulse-1"] = [good[0], extension, *good[1:]]
    return s


def slow_pulse() -> dict[str, Any]:
    """pulse-1 edits, then its next reply streams for a long time (the user stops it meanwhile)."""
    s = base()
    slow = {"content": [{"type": "text", "text": "Thinking about the verification " * 40}], "delay_ms": 250,
            "stop_reason": "end_turn"}
    s["scripts"]["pulsing:pulse-1"] = [READ_CORE, EDIT_CORE, slow, "Done."]
    return s


def scoping_asks_questions() -> dict[str, Any]:
    s = base()
    question = tool("ask_questions", questions=[{"type": "single_select", "prompt": "What should greet('') return?",
                                                 "options": ["Hello, world!", "Hello, stranger!"]}])
    s["scripts"]["scoping"] = [question, *s["scripts"]["scoping"]]
    return s


def quick_scope() -> dict[str, Any]:
    s = base()
    s["scripts"]["scoping"][1]["content"][-1]["input"]["recommended_path"] = "quick"
    return s


def pulse_never_completes() -> dict[str, Any]:
    """pulse-1 edits, then ends every turn in prose instead of complete_pulse, through every nudge, so the pulse
    fails with its edit kept in a recovery checkpoint; attempt 2 (script ``pulsing``) is clean."""
    s = base()
    s["scripts"]["pulsing:pulse-1"] = [READ_CORE, EDIT_CORE, "I think it is done.", "Still done, I believe.",
                                       "Done, as I said."]
    return s


def review_with_every_comment_kind() -> dict[str, Any]:
    """The demo, its review agent adding a file comment and a review comment beside its line comment."""
    s = base()
    review = s["scripts"]["review"]
    review.insert(2, {"content": [
        {"type": "tool_use", "name": "add_file_comment",
         "input": {"reason": "Note the missing docstring", "file_path": "greeter/core.py", "severity": "Low",
                   "category": "documentation", "description": "greet() could say what an empty name does."}},
        {"type": "tool_use", "name": "add_review_comment",
         "input": {"reason": "Overall", "severity": "Low", "category": "architecture",
                   "description": "Small, focused change with a test."}},
    ]})
    return s


REVIEW_CORE_COMMENT = "Collapse the two-line default into one: name = name or world."
REVIEW_TEST_COMMENT = "Say in a docstring what test_greet_empty_name covers."


def review_sends_comments_back() -> dict[str, Any]:
    """The demo, its review commenting on both files and recommending ``reject``; asked again after a fix round
    (one fix pulse per file, scripts ``fix-1-1`` and ``fix-1-2``), it approves with one Low remark."""
    s = base()
    first_look = s["scripts"]["review"][0]
    s["scripts"]["review"] = [
        first_look,
        {"content": [
            {"type": "tool_use", "name": "add_line_comment",
             "input": {"reason": "The default takes two lines", "file_path": "greeter/core.py", "start_line": 3,
                       "end_line": 4, "severity": "Medium", "category": "style",
                       "description": REVIEW_CORE_COMMENT}},
            {"type": "tool_use", "name": "add_file_comment",
             "input": {"reason": "The new test is not explained", "file_path": "tests/test_core.py",
                       "severity": "Medium", "category": "testing", "description": REVIEW_TEST_COMMENT}},
        ]},
        tool("complete_review", reason="Record the verdict", recommendation="reject",
             summary="Two things to fix before merging."),
        # Asked again once the fix pulses are committed.
        tool("get_diff", reason="See the branch with the fixes"),
        tool("add_review_comment", reason="A remark", severity="Low", category="documentation",
             description="A changelog line would help readers."),
        tool("complete_review", reason="Record the verdict", recommendation="approve",
             summary="Both comments sent back are resolved: the default is one line and the test says what it "
                     "covers."),
    ]
    s["scripts"]["pulsing:fix-1-1"] = [
        tool("read_file", reason="Read greet before changing it", path="greeter/core.py"),
        tool("edit_file", reason="Default the name in one line", path="greeter/core.py",
             oldString='    if not name:\n        name = "world"\n', newString='    name = name or "world"\n'),
        tool("shell", reason="Check both greetings",
             command="python3 -c \"from greeter.core import greet; assert greet('') == 'Hello, world!'; "
                     "assert greet('Ada') == 'Hello, Ada!'; print('ok')\""),
        complete("fix(greeter): default an empty name in one line"),
    ]
    s["scripts"]["pulsing:fix-1-2"] = [
        tool("read_file", reason="Read the test before changing it", path="tests/test_core.py"),
        tool("edit_file", reason="Say what the test covers", path="tests/test_core.py",
             oldString="def test_greet_empty_name():\n",
             newString='def test_greet_empty_name():\n    """An empty name greets the world."""\n'),
        tool("complete_pulse", summary="test(greeter): say what the empty-name test covers",
             filesChanged=["tests/test_core.py"]),
    ]
    return s
