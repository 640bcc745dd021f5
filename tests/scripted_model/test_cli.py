"""``autarch model serve-scripted``: started as a process, it prints its URL and answers the SDK."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "autarch.cli.main", "model", "serve-scripted", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_serve_scripted_prints_its_url_and_answers():
    process = start("demo", "--port", "0")
    try:
        line = process.stdout.readline()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)$", line.strip())
        assert match, line
        url = match[1]
        model = anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)
        reply = model.messages.create(
            model="m",
            max_tokens=100,
            messages=[{"role": "user", "content": "What is this project?"}],
            tools=[{"name": "read_file", "input_schema": {"type": "object"}}],
            extra_headers={"x-autarch-role": "discussion"},
        )
        assert reply.content[1].name == "read_file" and reply.content[1].id == "toolu_discussion_0_0"
        log = httpx.get(f"{url}/_scripted/requests").json()
        assert [(r["key"], r["step"], r["outcome"]) for r in log] == [("discussion", 0, "ok")]
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_scripted_refuses_a_malformed_scenario(tmp_path: Path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"scripts": {"research": [{"content": [{"type": "tool_use"}]}]}}))
    process = start(str(bad))
    _, err = process.communicate(timeout=30)
    assert process.returncode == 2
    assert 'bad.json: Object missing required field `name` - at `scripts["research"][0].content[0]`' in err
