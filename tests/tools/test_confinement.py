"""Property: whatever paths and symlinks an agent comes up with, nothing outside the worktree is read or written."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tempfile
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autarch.contracts.tools import ToolCall
from autarch.runtime.settings import Settings
from autarch.services.tools.paths import PathRefused, Worktree
from autarch.services.tools.service import build_executor

MARK = "OUTSIDE-d41d8cd98f00"
LINK_NAMES = ["l1", "l2", "l3"]
COMPONENTS = ["..", ".", "", "sub", "deeper", "in.txt", "outside", "secret.txt", "dir", "~", "new.txt", *LINK_NAMES]
TARGETS = [
    "outside_dir",
    "outside_file",
    "outside_missing",
    "relative_escape",
    "parent",
    "inside_file",
    "inside_dir",
    "absolute_inside",
    "chain",
    "self",
]

components = st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=5)
hostile_paths = st.one_of(
    components.map("/".join),
    components.map(lambda parts: "/" + "/".join(parts)),
    st.sampled_from(["{outside}/secret.txt", "{outside}", "{root}/../outside/secret.txt", "{root}/in.txt"]),
    st.text(alphabet="./l1 x\\~", min_size=1, max_size=12),
)
layouts = st.lists(
    st.tuples(st.sampled_from(["", "sub", "sub/deeper"]), st.sampled_from(LINK_NAMES), st.sampled_from(TARGETS)),
    max_size=4,
)


def build(base: Path, layout: list[tuple[str, str, str]]) -> tuple[Path, Path]:
    root = base / "worktree"
    outside = base / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(f"{MARK} file\n")
    (outside / "dir" / "secret.txt").write_text(f"{MARK} nested\n")
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "in.txt").write_text("inside\n")
    (root / "sub" / "in.txt").write_text("inside too\n")
    targets = {
        "outside_dir": str(outside),
        "outside_file": str(outside / "secret.txt"),
        "outside_missing": str(outside / "new.txt"),
        "relative_escape": "../../../outside",
        "parent": "..",
        "inside_file": str(root / "in.txt"),
        "inside_dir": str(root / "sub"),
        "absolute_inside": str(root),
        "chain": "l1",
        "self": "l2",
    }
    for where, name, target in layout:
        link = root / where / name
        if not os.path.lexists(link):
            os.symlink(targets[target], link)
    return root, outside


def snapshot(directory: Path) -> dict[str, str]:
    state = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        if path.is_symlink():
            state[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            state[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            state[rel] = "dir"
    return state


async def exercise(root: Path, data: Path, path: str) -> list[str]:
    executor = build_executor(Settings(data_dir=str(data)), grep_workers=0)
    outputs = []
    try:

        async def call(tool: str, **arguments: object) -> str:
            result = await executor.call(
                ToolCall(
                    session_id="s",
                    tool_call_id=uuid.uuid4().hex,
                    role="pulsing",
                    root=str(root),
                    tool=tool,
                    arguments={"reason": "probe", **arguments},
                )
            )
            outputs.append(result.content)
            return result.content

        await call("read_file", path=path)
        await call("edit_file", path=path, oldString=MARK, newString="pwned")
        await call("write_file", path=path, content="written")
        await call("multi_edit", path=path, edits=[{"oldString": "x", "newString": "y"}])
        listing = await call("list_directory", path=path, depth=None)
        await call("glob_search", pattern=path + "/**")
        await call("grep", pattern="OUTSIDE", glob=path)
        await call("grep", pattern="d41d8")
        await call("read_file", path="in.txt")
        entries = json.loads(listing)
        if isinstance(entries, list):
            for entry in entries:
                real = os.path.realpath(root / entry["path"])
                assert real == str(root.resolve()) or real.startswith(str(root.resolve()) + os.sep), entry
    finally:
        executor.close()
    return outputs


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts, path=hostile_paths)
def test_no_read_or_write_outside_the_worktree(layout, path):
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        root, outside = build(base, layout)
        path = path.format(outside=outside, root=root)
        before = snapshot(outside)
        outputs = asyncio.run(exercise(root, base / "data", path))
        assert snapshot(outside) == before
        for output in outputs:
            assert MARK not in output and "d41d8" not in output.replace('"pattern"', "")


@settings(max_examples=300, deadline=None)
@given(layout=layouts, path=hostile_paths)
def test_resolved_paths_never_leave_the_root(layout, path):
    with tempfile.TemporaryDirectory() as tmp:
        root, outside = build(Path(tmp), layout)
        path = path.format(outside=outside, root=root)
        worktree = Worktree(root)
        try:
            resolved = worktree.resolve(path, allow_root=True)
        except PathRefused:
            return
        real = os.path.realpath(worktree.absolute(resolved))
        assert real == worktree.root or real.startswith(worktree.root + os.sep)
        assert not os.path.isabs(resolved.rel) and ".." not in resolved.rel.split("/")
