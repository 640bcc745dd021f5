"""A checkpoint lists only the directories the worktree watch does not prove quiet, and still commits what
``git add -A`` would.

Each test drives the git engine in process on a real repository, with an agent's pulse doing something to the
worktree before its checkpoint. The oracle is the git command line: after every checkpoint the worktree has
nothing to commit (``git status`` with every untracked file shown), and the scan that made the commit was the
partial one where the test says so.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from autarch.runtime.errors import ServiceFailure
from autarch.services.git import snapshots
from autarch.services.git.watch import WorktreeWatch

from .gitcli import git
from .watched_loop import Loop

pytestmark = pytest.mark.skipif(not WorktreeWatch().available, reason="no inotify on this system")

PACKAGES = {f"src/pkg{i}/mod{j}.py": f"VALUE = {i * 10 + j}\n" for i in range(8) for j in range(4)}
PACKAGES |= {f"src/pkg{i}/sub/deep.py": f"DEEP = {i}\n" for i in range(8)}
PACKAGES |= {".gitignore": "build/\n*.log\n"}


@pytest.fixture
def loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Loop]:
    made = Loop(tmp_path, monkeypatch, files=PACKAGES)
    made.pulses(2)  # the first checkpoint lists and watches everything; the second proves it quiet
    yield made
    made.engine.close()


def uncommitted(loop: Loop) -> str:
    return git(loop.worktree, "status", "--porcelain", "--untracked-files=all", "--ignored=no")


def pulse(loop: Loop, work: Callable[[Path], object]) -> None:
    loop.start()
    loop.checkpoint(work)
    assert uncommitted(loop) == ""


def test_a_loops_checkpoint_looks_only_at_the_file_it_wrote(loop: Loop):
    for _ in range(4):
        pulse(loop, lambda root: (root / "src" / f"step{loop.number}.py").write_text(f"STEP = {loop.number}\n"))
        assert loop.last_scan.partial
        # No directory listed: the new file's name came with its event, and src/ was passed through to it.
        assert (loop.last_scan.listed, loop.last_scan.looked_up) == (0, 1)
    assert len(git(loop.worktree, "log", "--oneline").splitlines()) == 1 + 2 + 4
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "src/step6.py"


def _move_away(root: Path, away: Path) -> None:
    (root / "src" / "pkg3").rename(away)
    (root / "src" / "pkg3" / "sub").mkdir(parents=True)
    (root / "src" / "pkg3" / "sub" / "deep.py").write_text("DEEP = 'another directory'\n")


def _file_to_directory(root: Path) -> None:
    (root / "src" / "pkg4" / "mod1.py").unlink()
    (root / "src" / "pkg4" / "mod1.py").mkdir()
    (root / "src" / "pkg4" / "mod1.py" / "inner.py").write_text("INNER = 1\n")


def _made_a_link(root: Path, away: Path) -> None:
    shutil.rmtree(root / "src" / "pkg3")
    (root / "src" / "pkg3").symlink_to(away.parent)


def _new_nested(root: Path) -> None:
    (root / "lib" / "a" / "b").mkdir(parents=True)
    (root / "lib" / "a" / "b" / "c.py").write_text("C = 1\n")


def _parent_moved_and_made_again(root: Path, away: Path) -> None:
    (root / "src").rename(away)
    (root / "src" / "pkg5" / "sub").mkdir(parents=True)
    (root / "src" / "pkg5" / "sub" / "deep.py").write_text("DEEP = 'new'\n")


AGENT_WORK: dict[str, Callable[[Path, Path], object]] = {
    "edit deep in a quiet tree": lambda root, _: (root / "src" / "pkg6" / "sub" / "deep.py").write_text("DEEP = 60\n"),
    "same size": lambda root, _: (root / "src" / "pkg1" / "mod1.py").write_text("VALUE = 99\n"),
    "mode": lambda root, _: (root / "src" / "pkg1" / "mod2.py").chmod(0o755),
    "file removed": lambda root, _: (root / "src" / "pkg1" / "mod3.py").unlink(),
    "tree removed": lambda root, _: shutil.rmtree(root / "src" / "pkg2"),
    "tree renamed": lambda root, _: (root / "src" / "pkg3").rename(root / "src" / "moved"),
    "tree moved out, another made in its place": _move_away,
    "tree made a link": _made_a_link,
    "file made a directory": lambda root, _: _file_to_directory(root),
    "parent moved out, a child made again": _parent_moved_and_made_again,
    "new nested directories": lambda root, _: _new_nested(root),
}


@pytest.mark.parametrize("work", AGENT_WORK.values(), ids=AGENT_WORK.keys())
def test_what_an_agent_does_is_committed_from_a_partial_scan(loop: Loop, tmp_path: Path,
                                                               work: Callable[[Path, Path], object]):
    away = tmp_path / "away"
    pulse(loop, lambda root: work(root, away))
    assert loop.last_scan.partial
    # And what comes after it, in the directories it made or replaced: they are watched as new ones.
    for _ in range(2):
        pulse(loop, lambda root: [(Path(d) / f"later{loop.number}.txt").write_text("later\n")
                                  for d, _subdirs, _files in os.walk(root) if ".git" not in d])
        assert loop.last_scan.partial


@pytest.mark.parametrize("work", AGENT_WORK.values(), ids=AGENT_WORK.keys())
def test_what_an_agent_does_is_committed_from_its_events_alone(loop: Loop, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               work: Callable[[Path, Path], object]):
    """The same with no re-check of quiet files: the events' names must say everything that changed."""
    monkeypatch.setattr(snapshots, "SWEEP_FILES", 0)
    pulse(loop, lambda root: work(root, tmp_path / "away"))
    assert loop.last_scan.partial


def test_a_directory_made_empty_then_filled_is_committed(loop: Loop):
    pulse(loop, lambda root: (root / "empty" / "inner").mkdir(parents=True))
    pulse(loop, lambda root: (root / "empty" / "inner" / "late.py").write_text("LATE = 1\n"))
    assert loop.last_scan.partial
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "empty/inner/late.py"


def test_a_directory_moved_away_and_made_again_is_watched_again(loop: Loop, tmp_path: Path):
    pulse(loop, lambda root: _move_away(root, tmp_path / "away"))
    pulse(loop, lambda root: None)
    assert loop.scans_of_next_start() == 0
    loop.checkpoint(lambda root: None)
    # The new src/pkg3/sub is another directory than the one first watched by that path: a user's edit in it is
    # still an event.
    (loop.worktree / "src" / "pkg3" / "sub" / "deep.py").write_text("DEEP = 'the user'\n")
    with pytest.raises(ServiceFailure) as caught:
        loop.start()
    assert caught.value.code == "dirty_worktree"


def test_a_changed_gitignore_lists_everything(loop: Loop):
    pulse(loop, lambda root: (root / "src" / "pkg2" / "notes.log").write_text("ignored\n"))
    assert loop.last_scan.partial
    pulse(loop, lambda root: (root / ".gitignore").write_text("build/\n"))
    assert not loop.last_scan.partial
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD").splitlines() == [
        ".gitignore", "src/pkg2/notes.log"]
    pulse(loop, lambda root: (root / "src" / "pkg6" / "sub" / ".gitignore").write_text("*.py\n"))
    assert not loop.last_scan.partial
    pulse(loop, lambda root: (root / "src" / "pkg6" / "sub" / ".gitignore").unlink())
    assert not loop.last_scan.partial
    pulse(loop, lambda root: (root / "src" / "again.py").write_text("AGAIN = 1\n"))
    assert loop.last_scan.partial


def test_a_new_gitignore_that_ignores_itself_still_lists_everything(loop: Loop):
    pulse(loop, lambda root: (root / "src" / "pkg6" / "sub" / "trace.log").write_text("ignored\n"))
    # Not committed itself, it takes trace.log out of the root's *.log in a directory nothing happened in.
    pulse(loop, lambda root: (root / "src" / "pkg6" / ".gitignore").write_text(".gitignore\n!sub/trace.log\n"))
    assert not loop.last_scan.partial
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "src/pkg6/sub/trace.log"


def test_an_untracked_gitignore_removed_lists_everything(loop: Loop):
    def ignore_tmp(root: Path) -> None:
        (root / "src" / "pkg6" / ".gitignore").write_text(".gitignore\n*.tmp\n")
        (root / "src" / "pkg6" / "sub" / "x.tmp").write_text("ignored while that file is there\n")

    pulse(loop, ignore_tmp)
    pulse(loop, lambda root: None)
    assert loop.last_scan.partial
    # Nothing the index knows goes, and the directory holding x.tmp sees no event; the rule ignoring it does.
    pulse(loop, lambda root: (root / "src" / "pkg6" / ".gitignore").unlink())
    assert not loop.last_scan.partial
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "src/pkg6/sub/x.tmp"


def test_changed_ignore_rules_outside_the_worktree_list_everything(loop: Loop):
    exclude = loop.repo / ".git" / "info" / "exclude"
    exclude.write_text("*.tmp\n")
    pulse(loop, lambda root: (root / "src" / "pkg5" / "scratch.tmp").write_text("ignored\n"))
    assert not loop.last_scan.partial  # the rules changed since the last checkpoint
    pulse(loop, lambda root: None)
    assert loop.last_scan.partial
    exclude.write_text("")  # the user's: scratch.tmp counts now, though nothing in its directory changed
    pulse(loop, lambda root: None)
    assert not loop.last_scan.partial
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "src/pkg5/scratch.tmp"


def test_a_write_through_a_hard_link_from_an_unwatched_directory_is_committed(loop: Loop):
    def link_and_write(root: Path) -> None:
        (root / "build").mkdir()
        os.link(root / "src" / "pkg6" / "mod0.py", root / "build" / "mod0.py")
        with open(root / "build" / "mod0.py", "w") as through_the_link:  # no event in src/pkg6
            through_the_link.write("VALUE = 'through the link'\n")

    pulse(loop, link_and_write)
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "src/pkg6/mod0.py"
    pulse(loop, lambda root: None)
    assert not loop.last_scan.partial  # a tracked file with a second name: every directory is listed
    pulse(loop, lambda root: shutil.rmtree(root / "build"))
    assert not loop.last_scan.partial
    pulse(loop, lambda root: None)
    assert loop.last_scan.partial


def test_a_second_name_made_in_a_watched_directory_lists_everything_at_once(loop: Loop):
    def link_and_write(root: Path) -> None:
        os.link(root / "src" / "pkg6" / "mod1.py", root / "src" / "pkg1" / "alias.py")
        (root / "src" / "pkg1" / "alias.py").write_text("VALUE = 'both names'\n")  # no event in src/pkg6

    pulse(loop, link_and_write)
    assert not loop.last_scan.partial  # the partial walk found the second link and started over
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD").splitlines() == [
        "src/pkg1/alias.py", "src/pkg6/mod1.py"]


def test_the_recheck_of_quiet_files_finds_a_change_no_event_reported(loop: Loop,
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(snapshots, "SWEEP_FILES", 4)
    files = len(git(loop.worktree, "ls-files").splitlines())
    target = loop.worktree / "src" / "pkg7" / "sub" / "deep.py"
    hidden = loop.worktree.parent / "hidden-link"
    os.link(target, hidden)  # outside the worktree: neither the link nor a write through it is an event there
    with open(hidden, "w") as through_the_link:
        through_the_link.write("DEEP = 'unseen'\n")
    for _ in range(files // 4 + 2):
        loop.start()
        loop.checkpoint(lambda root: (root / "src" / "tick.txt").write_text(str(loop.number)))
        if "src/pkg7/sub/deep.py" in git(loop.worktree, "show", "--name-only", "--format=", "HEAD"):
            assert uncommitted(loop) == ""
            break
    else:
        pytest.fail(f"the write through a link was not committed within {files // 4 + 2} checkpoints")


def test_a_nested_repository_keeps_every_scan_whole(loop: Loop):
    def nested(root: Path) -> None:
        (root / "vendor" / "lib").mkdir(parents=True)
        git(root / "vendor" / "lib", "init", "-q")
        (root / "vendor" / "lib" / "code.py").write_text("CODE = 1\n")

    # git status lists the nested repository as untracked; git add -A, as the checkpoint, leaves it out.
    loop.start()
    loop.checkpoint(nested)
    assert not loop.last_scan.complete
    loop.start()
    loop.checkpoint(lambda root: None)
    assert not loop.last_scan.partial
    # Its .git going is no event in a watched directory: only a whole scan finds its files.
    pulse(loop, lambda root: shutil.rmtree(root / "vendor" / "lib" / ".git"))
    assert git(loop.worktree, "show", "--name-only", "--format=", "HEAD") == "vendor/lib/code.py"


@pytest.mark.parametrize("everything", [False, True], ids=["edits", "with links and ignore rules"])
def test_random_agent_work_is_committed_as_git_add_would(loop: Loop, tmp_path: Path, everything: bool):
    """Many kinds of change in random places, checkpoint after checkpoint. Edits alone leave most scans partial;
    hard links and changed ignore rules make scans whole, and must not change what is committed."""
    rng = random.Random(int(os.environ.get("AUTARCH_TEST_SEED", "34")))
    away = tmp_path / "away"
    away.mkdir()

    def dirs(root: Path) -> list[Path]:
        return [Path(d) for d, _sub, _files in os.walk(root) if ".git" not in Path(d).parts
                and "build" not in Path(d).parts and not Path(d).is_symlink()]

    def files(root: Path) -> list[Path]:
        return [p for d in dirs(root) for p in d.iterdir() if p.is_file() and not p.is_symlink()
                and p.name != ".git"]

    def step(root: Path) -> None:
        for _ in range(rng.randint(1, 3)):
            kind = rng.choice(["new", "new", "edit", "edit", "remove", "mkdir", "rmtree", "rename", "replace",
                               "chmod", "ignored", "symlink", "file to dir",
                               *(["gitignore", "hard link", "second name"] if everything else [])])
            here = rng.choice(dirs(root))
            existing = files(root)
            if kind == "new":
                (here / f"n{rng.randrange(10**6)}.py").write_text("NEW = 1\n")
            elif kind == "edit" and existing:
                rng.choice(existing).write_text(f"EDIT = {rng.randrange(10**6)}\n")
            elif kind == "remove" and existing:
                rng.choice(existing).unlink()
            elif kind == "mkdir":
                made = here / f"d{rng.randrange(10**6)}" / "inner"
                made.mkdir(parents=True)
                if rng.random() < 0.7:
                    (made / "f.py").write_text("F = 1\n")
            elif kind in ("rmtree", "rename", "replace") and here != root:
                if kind == "rmtree":
                    shutil.rmtree(here)
                elif kind == "rename":
                    here.rename(here.with_name(here.name + "r"))
                else:
                    here.rename(away / f"{rng.randrange(10**6)}")
                    (here / "again").mkdir(parents=True)
                    (here / "again" / "g.py").write_text("G = 1\n")
            elif kind == "chmod" and existing:
                rng.choice(existing).chmod(0o755)
            elif kind == "ignored" and not (here / "trace.log").is_dir():
                (here / "trace.log").write_text("ignored\n")
            elif kind == "symlink":
                link = here / f"l{rng.randrange(10**6)}"
                link.symlink_to(rng.choice(existing) if existing else away)
            elif kind == "file to dir" and existing:
                victim = rng.choice(existing)
                victim.unlink()
                victim.mkdir()
                (victim / "inside.py").write_text("INSIDE = 1\n")
            elif kind == "gitignore" and not (here / ".gitignore").is_dir():
                (here / ".gitignore").write_text(rng.choice(["*.py\n", "", "d*/\n", "!trace.log\n"]))
            elif kind == "hard link" and existing:
                # Written through a second name in an ignored directory: no event where the file is.
                (root / "build").mkdir(exist_ok=True)
                name = root / "build" / f"h{rng.randrange(10**6)}"
                os.link(rng.choice(existing), name)
                name.write_text(f"THROUGH = {rng.randrange(10**6)}\n")
                if rng.random() < 0.5:
                    name.unlink()
            elif kind == "second name" and existing:
                alias = here / f"a{rng.randrange(10**6)}.py"
                os.link(rng.choice(existing), alias)
                alias.write_text(f"ALIAS = {rng.randrange(10**6)}\n")

    partial = 0
    for _ in range(40):
        pulse(loop, step)
        partial += loop.last_scan.partial
    assert everything or partial >= 30
