"""The clean check before a pulse trusts the last checkpoint's scan only while inotify saw nothing since.

Each test drives the git engine in process on a real repository: pulses that each write a file and checkpoint,
then something done to the worktree between two pulses, then the next ``start_pulse``. A user's edit must be
refused as it is without the watch; a worktree nobody touched must start without a scan.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autarch.contracts.git import RemoveWorktree
from autarch.runtime.errors import ServiceFailure
from autarch.services.git.watch import WorktreeWatch

from .gitcli import git
from .watched_loop import Loop

pytestmark = pytest.mark.skipif(not WorktreeWatch().available, reason="no inotify on this system")


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Loop]:
    made = Loop(tmp_path, monkeypatch)
    yield made
    made.engine.close()


def test_a_pulse_after_an_undisturbed_checkpoint_starts_without_a_scan(loop: Loop):
    loop.pulses(2)  # the first checkpoint sets the watches up; the second one proves the worktree quiet
    for _ in range(5):
        assert loop.scans_of_next_start() == 0
        loop.checkpoint()
    assert git(loop.worktree, "status", "--porcelain") == ""
    assert len(git(loop.worktree, "log", "--oneline").splitlines()) == 1 + 2 + 5


def test_a_new_directory_is_watched_before_the_checkpoint_lists_it(loop: Loop):
    loop.pulses(2)
    loop.start()

    def new_directory(root: Path) -> None:
        (root / "lib" / "deep").mkdir(parents=True)
        (root / "lib" / "deep" / "mod.py").write_text("X = 1\n")

    loop.checkpoint(new_directory)
    assert loop.scans_of_next_start() == 0  # lib and lib/deep were watched before the checkpoint listed them
    loop.checkpoint()
    assert loop.scans_of_next_start() == 0
    (loop.worktree / "lib" / "deep" / "mod.py").write_text("X = 2  # the user's\n")
    loop.checkpoint(lambda root: None)
    assert git(loop.worktree, "show", "--stat", "--format=", "HEAD").strip().startswith("lib/deep/mod.py")


def _link_dir(root: Path) -> None:
    shutil.rmtree(root / "src")
    (root / "src").symlink_to("/etc")


def _link_file(root: Path) -> None:
    (root / "README.md").unlink()
    (root / "README.md").symlink_to("src/app.py")


def _replace(root: Path) -> None:
    (root / "new").write_text("other\n")
    os.replace(root / "new", root / "src" / "app.py")


EDITS: dict[str, Callable[[Path], object]] = {
    "content": lambda root: (root / "src" / "app.py").write_text("def main():\n    return 2\n"),
    "same size": lambda root: (root / "src" / "app.py").write_text("def main():\n    return 9\n"),
    "mode": lambda root: (root / "src" / "app.py").chmod(0o755),
    "removed": lambda root: (root / "README.md").unlink(),
    "directory moved": lambda root: (root / "src").rename(root / "source"),
    "directory made a link": _link_dir,
    "file made a link": _link_file,
    "replaced by rename": _replace,
}


@pytest.mark.parametrize("edit", EDITS.values(), ids=EDITS.keys())
def test_a_user_edit_between_pulses_is_still_refused(loop: Loop, edit: Callable[[Path], object]):
    loop.pulses(3)
    edit(loop.worktree)
    with pytest.raises(ServiceFailure) as caught:
        loop.start()
    assert caught.value.code == "dirty_worktree"


def test_an_agents_link_never_makes_the_service_watch_outside_the_worktree(loop: Loop, tmp_path: Path):
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    loop.start()

    def tracked_deep_directory(root: Path) -> None:
        (root / "src" / "deep").mkdir()
        (root / "src" / "deep" / "mod.py").write_text("X = 1\n")

    loop.checkpoint(tracked_deep_directory)
    loop.pulses(1)  # src/deep is watched now
    loop.start()

    def swap_for_a_link(root: Path) -> None:
        # The agent's pulse: src (holding the tracked src/deep) becomes a link to a directory outside that has a
        # deep of its own. The watch of the real src/deep went with it; watched again by its path, it would be
        # the outside one.
        shutil.rmtree(root / "src")
        (root / "src").symlink_to(outside)

    loop.checkpoint(swap_for_a_link)
    loop.pulses(2)
    assert loop.scans_of_next_start() == 0
    loop.checkpoint(lambda root: None)
    (outside / "deep" / "elsewhere.txt").write_text("not the worktree's\n")
    assert loop.scans_of_next_start() == 0  # nothing outside the worktree counts as its event


def test_an_edit_the_user_takes_back_is_not_refused(loop: Loop):
    loop.pulses(3)
    app = loop.worktree / "src" / "app.py"
    original = app.read_text()
    app.write_text("changed\n")
    app.write_text(original)
    assert loop.scans_of_next_start() == 1  # the events forced the scan, which found the content unchanged


def test_an_index_rewritten_by_git_means_a_scan(loop: Loop):
    loop.pulses(3)
    (loop.worktree / "README.md").write_text("# staged by the user\n")
    git(loop.worktree, "add", "README.md")
    with pytest.raises(ServiceFailure) as caught:
        loop.start()
    assert caught.value.code == "dirty_worktree"


def test_a_lost_event_means_a_scan(loop: Loop):
    loop.pulses(3)
    assert loop.quiet()
    # More events than the kernel queues (fs.inotify.max_queued_events, 16,384 by default): it drops the rest and
    # says so, and no worktree's proof holds after that.
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    scratch = loop.worktree / "src" / "scratch.txt"
    for i in range(limit // 2 + 100):
        scratch.write_text(str(i))
        scratch.unlink()
    assert not loop.quiet()
    assert loop.scans_of_next_start() == 1


def test_a_removed_worktree_gives_its_watches_up(loop: Loop):
    loop.pulses(2)
    assert loop.engine.watch.watched(loop.worktree) == 2  # the top and src/
    loop.start()
    loop.checkpoint()
    loop.engine.remove_worktree(RemoveWorktree(run_id="wf"))
    assert loop.engine.watch.watched(loop.worktree) == 0


def test_without_inotify_every_clean_check_scans(loop: Loop, monkeypatch: pytest.MonkeyPatch):
    loop.engine.watch.close()
    loop.pulses(3)
    assert loop.scans_of_next_start() == 1
    loop.checkpoint()
    (loop.worktree / "src" / "app.py").write_text("edited\n")
    with pytest.raises(ServiceFailure) as caught:
        loop.start()
    assert caught.value.code == "dirty_worktree"


def test_a_watch_shared_by_two_worktrees_stays_until_both_let_go(tmp_path: Path):
    watch = WorktreeWatch()
    try:
        top = tmp_path / "shared"
        (top / "d").mkdir(parents=True)
        # One worktree's directory is the top of another (a worktree nested in one): the kernel has one watch per
        # inode, so both hold the same descriptor.
        nested = top / "d"
        first, second = watch.mark(top), watch.mark(nested)
        watch.settle(first, {b"d"}, b"x")
        watch.settle(second, set(), b"y")
        first, second = watch.mark(top), watch.mark(nested)
        assert watch.settle(first, {b"d"}, b"x") and watch.settle(second, set(), b"y")
        watch.forget(nested)
        (top / "d" / "f").write_text("x")
        assert not watch.unchanged(top, b"x")  # the first worktree's watch on d/ still reports
    finally:
        watch.close()


def test_too_many_directories_are_not_watched(tmp_path: Path):
    watch = WorktreeWatch(max_dirs=3)
    try:
        for name in "abcd":
            (tmp_path / name).mkdir()
        mark = watch.mark(tmp_path)
        assert not watch.settle(mark, {b"a", b"b", b"c", b"d"}, b"x")
        mark = watch.mark(tmp_path)
        assert not watch.settle(mark, {b"a", b"b", b"c", b"d"}, b"x")
        assert watch.watched(tmp_path) == 0
        assert not watch.unchanged(tmp_path, b"x")
    finally:
        watch.close()
