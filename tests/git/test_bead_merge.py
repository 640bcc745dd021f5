"""The swarm's verbs (contracts.bead_git): worker worktrees, bead commits and ordered merges.

Both the engine directly (re-created on the same data dir to stand for a restarted service) and the
service over a real nats-server; every result is checked with the git command line.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from autarch.contracts.bead_git import (
    BeadBegun,
    BeadCommitted,
    BeadMerged,
    BeginBead,
    CloseWorker,
    CommitBead,
    MergeBead,
    OpenWorker,
    SyncWorkflowWorktree,
    WorkerClosed,
    WorkerWorktree,
    WorkflowWorktreeSynced,
    WriteWorkerFiles,
)
from autarch.contracts.git import (
    CreateWorkflowBranch,
    GetWorkflowBranch,
    ListWorktrees,
    RegisterRepository,
    RemoveWorktree,
    WorktreeList,
    WorktreeRemoved,
)
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.services.git import merges
from autarch.services.git.commits import Identity
from autarch.services.git.engine import GitEngine

from .gitcli import fsck, git, make_user_repo, repo_state

BRANCH = "autarch/wf-1"
IDENTITY = Identity(author_name="Autarch", author_email="autarch@localhost")


def new_engine(data_dir: Path) -> GitEngine:
    return GitEngine(data_dir=data_dir, identity=IDENTITY)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_user_repo(tmp_path / "project")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def engine(repo: Path, data: Path) -> GitEngine:
    engine = new_engine(data)
    registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
    engine.create_workflow_branch(
        CreateWorkflowBranch(run_id="wf1", repository_id=registered.repository_id, branch=BRANCH)
    )
    return engine


def open_worker(engine: GitEngine, worker: str) -> Path:
    return Path(engine.open_worker(OpenWorker(workflow_id="wf1", worker=worker)).worktree_path)


def begin(engine: GitEngine, worker: str, bead: str, attempt: int = 1) -> BeadBegun:
    return engine.begin_bead(BeginBead(workflow_id="wf1", worker=worker, bead_id=bead, attempt=attempt))


def commit(engine: GitEngine, worker: str, bead: str, summary: str, attempt: int = 1, body: str = "") -> BeadCommitted:
    return engine.commit_bead(
        CommitBead(workflow_id="wf1", worker=worker, bead_id=bead, attempt=attempt, summary=summary, body=body)
    )


def merge(engine: GitEngine, worker: str, bead: str, attempt: int = 1) -> BeadMerged:
    return engine.merge_bead(MergeBead(workflow_id="wf1", worker=worker, bead_id=bead, attempt=attempt))


def tip(repo: Path) -> str:
    return git(repo, "rev-parse", BRANCH)


def workflow_worktree(engine: GitEngine) -> Path:
    return Path(engine.view(GetWorkflowBranch(run_id="wf1")).worktree_path)


def test_open_worker_makes_a_worktree_on_its_own_branch(engine: GitEngine, repo: Path):
    opened = engine.open_worker(OpenWorker(workflow_id="wf1", worker="w1"))
    assert opened == WorkerWorktree(
        workflow_id="wf1", worker="w1", branch=f"{BRANCH}.w-w1", worktree_path=opened.worktree_path
    )
    worktree = Path(opened.worktree_path)
    assert worktree.parent.parent == workflow_worktree(engine).parent  # beside the workflow's
    assert git(repo, "rev-parse", f"{BRANCH}.w-w1") == tip(repo)
    assert git(worktree, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}.w-w1"
    assert git(worktree, "status", "--porcelain") == ""
    assert (worktree / "src/app.py").read_text() == "def main():\n    return 1\n"
    (worktree / "work.txt").write_text("in progress\n")
    assert engine.open_worker(OpenWorker(workflow_id="wf1", worker="w1")) == opened  # kept as is
    assert (worktree / "work.txt").exists()
    # Worker worktrees are not workflows: list_worktrees does not report them.
    registered = engine.register_repository(RegisterRepository(path=str(repo), base_branch="main"))
    listed = engine.list_worktrees(ListWorktrees(repository_id=registered.repository_id))
    assert isinstance(listed, WorktreeList) and [w.run_id for w in listed.items] == ["wf1"]
    assert str(worktree) in git(repo, "worktree", "list", "--porcelain")


def test_fast_forward_when_nothing_landed(engine: GitEngine, repo: Path):
    worktree = open_worker(engine, "w1")
    begun = begin(engine, "w1", "b1")
    assert begun.base_commit == tip(repo)
    (worktree / "src/app.py").write_text("def main():\n    return 2\n")
    (worktree / "node_modules").mkdir()
    (worktree / "node_modules/dep.js").write_text("ignored\n")
    done = commit(engine, "w1", "b1", "return two", body="Because two.")
    assert done.files_changed == ["src/app.py"] and done.base_commit == begun.base_commit
    assert done.message == "feat(b1): return two\n\nBecause two.\n"
    assert git(repo, "rev-parse", f"{BRANCH}.w-w1") == done.commit
    assert git(worktree, "status", "--porcelain") == ""  # the index follows the commit
    merged = merge(engine, "w1", "b1")
    assert (merged.status, merged.commit, merged.fast_forward) == ("merged", done.commit, True)
    assert tip(repo) == done.commit
    assert git(repo, "log", "-1", "--format=%s|%an", BRANCH) == "feat(b1): return two|Autarch"
    # The workflow worktree was clean on its branch: its checkout follows.
    main = workflow_worktree(engine)
    assert (main / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert git(main, "status", "--porcelain") == ""
    fsck(repo)


def test_disjoint_changes_land_on_a_moved_tip(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    base = begin(engine, "w1", "b1").base_commit
    assert begin(engine, "w2", "b2").base_commit == base
    (w1 / "src/app.py").write_text("def main():\n    return 2\n")
    (w2 / "docs/guide.md").write_text("Guide, rewritten\n")
    first = commit(engine, "w1", "b1", "app returns two")
    second = commit(engine, "w2", "b2", "rewrite the guide", body="Details.")
    assert merge(engine, "w1", "b1").fast_forward
    merged = merge(engine, "w2", "b2")
    assert merged.status == "merged" and not merged.fast_forward
    assert merged.commit == tip(repo) and merged.commit != second.commit
    assert git(repo, "rev-parse", f"{merged.commit}^") == first.commit
    assert git(repo, "log", "-1", "--format=%B", BRANCH) == "feat(b2): rewrite the guide\n\nDetails."
    assert git(repo, "log", "-1", "--format=%an <%ae>|%at", BRANCH) == git(
        repo, "log", "-1", "--format=%an <%ae>|%at", second.commit  # type: ignore[arg-type]  # committed above
    )
    assert git(repo, "show", f"{BRANCH}:src/app.py") == "def main():\n    return 2"
    assert git(repo, "show", f"{BRANCH}:docs/guide.md") == "Guide, rewritten"
    assert git(repo, "diff", "--name-only", f"{first.commit}", BRANCH) == "docs/guide.md"
    assert git(repo, "log", "--format=%s", BRANCH).splitlines() == [
        "feat(b2): rewrite the guide",
        "feat(b1): app returns two",
        "initial",
    ]
    main = workflow_worktree(engine)
    assert (main / "docs/guide.md").read_text() == "Guide, rewritten\n"
    assert git(main, "status", "--porcelain") == ""
    fsck(repo)


def test_a_conflict_changes_nothing_and_says_what_landed(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    begin(engine, "w2", "b2")
    (w1 / "src/app.py").write_text("def main():\n    return 2\n")
    (w1 / "README.md").write_text("# Demo one\n")
    (w2 / "src/app.py").write_text("def main():\n    return 3\n")
    (w2 / "README.md").write_text("# Demo two\n")
    (w2 / "src/util.py").write_text("VALUE = 3\n")
    first = commit(engine, "w1", "b1", "two")
    commit(engine, "w2", "b2", "three")
    merge(engine, "w1", "b1")
    main = workflow_worktree(engine)
    before = repo_state(repo)
    files_before = {p: (main / p).read_text() for p in ("src/app.py", "README.md", "src/util.py")}
    conflict = merge(engine, "w2", "b2")
    assert conflict.status == "conflict" and conflict.commit is None
    assert conflict.conflicting_files == ["README.md", "src/app.py"]
    assert conflict.landed_since == [first.commit]
    assert repo_state(repo) == before
    assert {p: (main / p).read_text() for p in files_before} == files_before
    assert merge(engine, "w2", "b2") == conflict  # recorded: a repeat answers the same
    # A new attempt from the new tip merges.
    assert begin(engine, "w2", "b2", attempt=2).base_commit == first.commit
    assert (w2 / "src/app.py").read_text() == "def main():\n    return 2\n"
    (w2 / "src/util.py").write_text("VALUE = 3\n")
    commit(engine, "w2", "b2", "three", attempt=2)
    assert merge(engine, "w2", "b2", attempt=2).fast_forward


def test_a_file_where_the_other_side_made_a_directory_conflicts(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    begin(engine, "w2", "b2")
    (w1 / "lib").write_text("a file\n")
    (w2 / "lib").mkdir()
    (w2 / "lib/mod.py").write_text("a module\n")
    commit(engine, "w1", "b1", "lib file")
    commit(engine, "w2", "b2", "lib package")
    merge(engine, "w1", "b1")
    assert merge(engine, "w2", "b2").conflicting_files == ["lib/mod.py"]


def test_deletions_new_files_and_modes_are_carried_over(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    begin(engine, "w2", "b2")
    (w1 / "README.md").write_text("# Demo, by w1\n")
    (w2 / "docs/guide.md").unlink()  # docs/ ends up empty: the directory goes too
    (w2 / "pkg/deep").mkdir(parents=True)
    (w2 / "pkg/deep/new.py").write_text("NEW = 1\n")
    (w2 / "bin/run.sh").chmod(0o644)
    (w2 / "src/link").symlink_to("app.py")
    commit(engine, "w1", "b1", "readme")
    done = commit(engine, "w2", "b2", "reshape")
    assert done.files_changed == ["bin/run.sh", "docs/guide.md", "pkg/deep/new.py", "src/link"]
    merge(engine, "w1", "b1")
    assert not merge(engine, "w2", "b2").fast_forward
    assert git(repo, "ls-tree", "-r", "--name-only", BRANCH).splitlines() == [
        ".gitignore",
        "README.md",
        "bin/run.sh",
        "pkg/deep/new.py",
        "src/app.py",
        "src/link",
        "src/util.py",
    ]
    assert git(repo, "ls-tree", BRANCH, "bin/run.sh").startswith("100644")
    assert git(repo, "ls-tree", BRANCH, "src/link").startswith("120000")
    assert git(repo, "show", f"{BRANCH}:README.md") == "# Demo, by w1"
    assert git(repo, "show", "--name-status", "--format=", BRANCH).splitlines() == [
        "M\tbin/run.sh",
        "D\tdocs/guide.md",
        "A\tpkg/deep/new.py",
        "A\tsrc/link",
    ]
    main = workflow_worktree(engine)
    assert not (main / "docs").exists() and (main / "pkg/deep/new.py").exists()
    assert git(main, "status", "--porcelain") == ""
    fsck(repo)


def test_begin_bead_discards_leftovers_and_starts_from_the_current_tip(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    (w1 / "src/app.py").write_text("half done\n")
    (w1 / "docs/guide.md").unlink()
    (w1 / "scratch").mkdir()
    (w1 / "scratch/notes.txt").write_text("leftover\n")
    (w1 / "node_modules").mkdir()
    (w1 / "node_modules/dep.js").write_text("ignored, kept\n")
    (w1 / "debug.log").write_text("ignored, kept\n")
    # Meanwhile another bead lands.
    begin(engine, "w2", "b2")
    (w2 / "README.md").write_text("# Landed\n")
    landed = commit(engine, "w2", "b2", "landed")
    merge(engine, "w2", "b2")
    again = begin(engine, "w1", "b1", attempt=2)
    assert again.base_commit == landed.commit == tip(repo)
    assert git(repo, "rev-parse", f"{BRANCH}.w-w1") == landed.commit
    assert git(w1, "status", "--porcelain", "--untracked-files=all") == ""
    assert (w1 / "src/app.py").read_text() == "def main():\n    return 1\n"
    assert (w1 / "docs/guide.md").exists() and not (w1 / "scratch").exists()
    assert (w1 / "README.md").read_text() == "# Landed\n"
    assert (w1 / "node_modules/dep.js").exists() and (w1 / "debug.log").exists()
    # A repeat of the begin answers the same and leaves the work begun since alone.
    (w1 / "src/app.py").write_text("attempt two\n")
    assert begin(engine, "w1", "b1", attempt=2) == again
    assert (w1 / "src/app.py").read_text() == "attempt two\n"


def test_the_next_bead_keeps_the_coordination_files_written_for_the_worker(engine: GitEngine, repo: Path):
    """A standalone run's STATE.md (and a handoff) is written between beads, for the next bead to read: the begin of
    that bead resets the worktree around it, not through it."""
    w1 = open_worker(engine, "w1")
    begin(engine, "w1", "b1")
    (w1 / "src/app.py").write_text("done\n")
    commit(engine, "w1", "b1", "one")
    merge(engine, "w1", "b1")
    engine.write_worker_files(WriteWorkerFiles(workflow_id="wf1", worker="w1",
                                               files={".pulse/STATE.md": "# state\n- b1: one\n"}))
    (w1 / "scratch.txt").write_text("leftover\n")
    begin(engine, "w1", "b2")
    assert (w1 / ".pulse/STATE.md").read_text() == "# state\n- b1: one\n"
    assert not (w1 / "scratch.txt").exists()
    assert (w1 / "src/app.py").read_text() == "done\n"


def test_a_pulse_dir_the_agent_made_a_link_is_neither_followed_by_the_next_bead_nor_written_through(
        engine: GitEngine, repo: Path, tmp_path: Path):
    """``.pulse/`` outlives a bead, so an agent may leave a link there pointing out of the worktree: the next bead's
    reset leaves what it points at alone, and the service's next write replaces the link instead of following it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "STATE.md").write_text("not the worktree's\n")
    w1 = open_worker(engine, "w1")
    begin(engine, "w1", "b1")
    (w1 / ".pulse").symlink_to(outside, target_is_directory=True)
    begin(engine, "w1", "b2")
    assert (outside / "STATE.md").read_text() == "not the worktree's\n"
    engine.write_worker_files(WriteWorkerFiles(workflow_id="wf1", worker="w1", files={".pulse/STATE.md": "ours\n"}))
    assert (outside / "STATE.md").read_text() == "not the worktree's\n"
    assert not (w1 / ".pulse").is_symlink() and (w1 / ".pulse/STATE.md").read_text() == "ours\n"


def test_a_commit_without_changes(engine: GitEngine, repo: Path):
    worktree = open_worker(engine, "w1")
    begin(engine, "w1", "b1")
    (worktree / "build.log").write_text("ignored\n")
    before = repo_state(repo)
    done = commit(engine, "w1", "b1", "nothing")
    assert done.commit is None and done.files_changed == [] and done.message == ""
    assert repo_state(repo) == before
    merged = merge(engine, "w1", "b1")
    assert (merged.status, merged.commit, merged.fast_forward) == ("merged", tip(repo), False)
    assert repo_state(repo) == before


def test_every_verb_is_idempotent_across_a_restart(engine: GitEngine, repo: Path, data: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    opened = engine.open_worker(OpenWorker(workflow_id="wf1", worker="w1"))
    begun1, begun2 = begin(engine, "w1", "b1"), begin(engine, "w2", "b2")
    (w1 / "a.txt").write_text("a\n")
    (w2 / "b.txt").write_text("b\n")
    committed1, committed2 = commit(engine, "w1", "b1", "a"), commit(engine, "w2", "b2", "b")
    merged1, merged2 = merge(engine, "w1", "b1"), merge(engine, "w2", "b2")
    synced = engine.sync_workflow_worktree(SyncWorkflowWorktree(workflow_id="wf1"))
    assert synced == WorkflowWorktreeSynced(workflow_id="wf1", head=tip(repo))
    state = repo_state(repo)
    for again in (engine, new_engine(data)):
        assert again.open_worker(OpenWorker(workflow_id="wf1", worker="w1")) == opened
        assert begin(again, "w1", "b1") == begun1 and begin(again, "w2", "b2") == begun2
        assert commit(again, "w1", "b1", "a") == committed1 and commit(again, "w2", "b2", "b") == committed2
        assert merge(again, "w1", "b1") == merged1 and merge(again, "w2", "b2") == merged2
        assert again.sync_workflow_worktree(SyncWorkflowWorktree(workflow_id="wf1")) == synced
        assert repo_state(repo) == state
    restarted = new_engine(data)
    closed = restarted.close_worker(CloseWorker(workflow_id="wf1", worker="w1"))
    assert closed == WorkerClosed(workflow_id="wf1", worker="w1", removed=True)
    assert new_engine(data).close_worker(CloseWorker(workflow_id="wf1", worker="w1")).removed is False
    assert not w1.exists() and git(repo, "branch", "--list", f"{BRANCH}.w-w1") == ""
    assert str(w1) not in git(repo, "worktree", "list", "--porcelain")
    fsck(repo)


def test_a_merge_cut_short_after_its_journal_is_finished_by_a_repeat(
    engine: GitEngine, repo: Path, data: Path, monkeypatch: pytest.MonkeyPatch
):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    begin(engine, "w2", "b2")
    (w1 / "a.txt").write_text("a\n")
    (w2 / "b.txt").write_text("b\n")
    commit(engine, "w1", "b1", "a")
    commit(engine, "w2", "b2", "b")
    merge(engine, "w1", "b1")
    before = tip(repo)

    def crash(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt("killed before the branch moved")

    monkeypatch.setattr(merges, "_move", crash)
    with pytest.raises(KeyboardInterrupt):
        merge(engine, "w2", "b2")
    monkeypatch.undo()
    assert tip(repo) == before
    merged = merge(new_engine(data), "w2", "b2")
    assert merged.status == "merged" and git(repo, "rev-parse", f"{merged.commit}^") == before
    assert merge(new_engine(data), "w2", "b2") == merged
    assert git(repo, "log", "--format=%s", BRANCH).splitlines()[:2] == ["feat(b2): b", "feat(b1): a"]


def test_a_dirty_workflow_worktree_is_left_alone_until_synced(engine: GitEngine, repo: Path):
    worktree = open_worker(engine, "w1")
    main = workflow_worktree(engine)
    (main / "README.md").write_text("# someone's edit\n")
    begin(engine, "w1", "b1")
    (worktree / "src/app.py").write_text("def main():\n    return 2\n")
    merge_commit = commit(engine, "w1", "b1", "two").commit
    merge(engine, "w1", "b1")
    assert tip(repo) == merge_commit
    assert (main / "src/app.py").read_text() == "def main():\n    return 1\n"  # not synced: dirty
    with pytest.raises(ServiceFailure) as caught:
        engine.sync_workflow_worktree(SyncWorkflowWorktree(workflow_id="wf1"))
    assert caught.value.code == "dirty_worktree"
    git(main, "checkout", "--", "README.md")
    synced = engine.sync_workflow_worktree(SyncWorkflowWorktree(workflow_id="wf1"))
    assert synced.head == merge_commit
    assert (main / "src/app.py").read_text() == "def main():\n    return 2\n"
    assert git(main, "status", "--porcelain") == ""


def test_remove_worktree_removes_the_workers(engine: GitEngine, repo: Path):
    w1, w2 = open_worker(engine, "w1"), open_worker(engine, "w2")
    begin(engine, "w1", "b1")
    (w1 / "a.txt").write_text("unmerged\n")
    commit(engine, "w1", "b1", "a")
    removed = engine.remove_worktree(RemoveWorktree(run_id="wf1"))
    assert isinstance(removed, WorktreeRemoved) and removed.removed
    assert sorted(removed.deleted_branches) == [f"{BRANCH}.w-w1", f"{BRANCH}.w-w2"]
    assert not w1.exists() and not w2.exists() and not w1.parent.exists()
    assert git(repo, "branch", "--list", f"{BRANCH}.w-*") == ""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert engine.close_worker(CloseWorker(workflow_id="wf1", worker="w1")).removed is False
    fsck(repo)


def test_errors_are_typed(engine: GitEngine):
    cases = [
        (lambda: engine.open_worker(OpenWorker(workflow_id="nope", worker="w1")), "not_found"),
        (lambda: begin(engine, "w9", "b1"), "not_found"),
        (lambda: engine.close_worker(CloseWorker(workflow_id="wf1", worker="w9")), "not_found"),
        (lambda: engine.open_worker(OpenWorker(workflow_id="wf1", worker="../x")), "bad_request"),
    ]
    open_worker(engine, "w1")
    cases += [
        (lambda: commit(engine, "w1", "b1", "x"), "not_found"),
        (lambda: merge(engine, "w1", "b1"), "not_found"),
    ]
    for call, code in cases:
        with pytest.raises(ServiceFailure) as caught:
            call()
        assert caught.value.code == code
    begin(engine, "w1", "b1")
    with pytest.raises(ServiceFailure) as caught:
        merge(engine, "w1", "b1")
    assert caught.value.code == "conflict"  # not committed yet


# --- over NATS -------------------------------------------------------------------------------------


async def test_concurrent_merges_over_the_service_are_serialised_and_both_land(client, tmp_path: Path):
    repo = make_user_repo(tmp_path / "repo")
    await client.workflow(repo, workflow_id="wf1", branch=BRANCH)
    workers = ["w1", "w2", "w3"]
    commits = {}
    for n, worker in enumerate(workers):
        opened = await client.call("open_worker", OpenWorker(workflow_id="wf1", worker=worker), WorkerWorktree)
        await client.call(
            "begin_bead", BeginBead(workflow_id="wf1", worker=worker, bead_id=f"b{n}", attempt=1), BeadBegun
        )
        (Path(opened.worktree_path) / f"file{n}.txt").write_text(f"{n}\n")
        done = await client.call(
            "commit_bead",
            CommitBead(workflow_id="wf1", worker=worker, bead_id=f"b{n}", attempt=1, summary=f"file {n}"),
            BeadCommitted,
        )
        commits[worker] = done.commit
    results = await asyncio.gather(
        *(
            client.call(
                "merge_bead", MergeBead(workflow_id="wf1", worker=worker, bead_id=f"b{n}", attempt=1), BeadMerged
            )
            for n, worker in enumerate(workers)
        )
    )
    assert [r.status for r in results] == ["merged"] * 3
    assert sum(r.fast_forward for r in results) == 1
    subjects = git(repo, "log", "--format=%s", BRANCH).splitlines()
    assert sorted(subjects[:3]) == ["feat(b0): file 0", "feat(b1): file 1", "feat(b2): file 2"]
    assert subjects[3:] == ["initial"]
    assert git(repo, "rev-parse", BRANCH) in {r.commit for r in results}
    for n in range(3):
        assert git(repo, "show", f"{BRANCH}:file{n}.txt") == str(n)
    synced = await client.call(
        "sync_workflow_worktree", SyncWorkflowWorktree(workflow_id="wf1"), WorkflowWorktreeSynced
    )
    assert synced.head == git(repo, "rev-parse", BRANCH)
    closed = await client.call("close_worker", CloseWorker(workflow_id="wf1", worker="w1"), WorkerClosed)
    assert closed.removed
    fsck(repo)


async def test_bad_and_unknown_requests_over_the_service(client, user_repo: Path):
    await client.workflow(user_repo)
    with pytest.raises(RemoteError) as caught:
        await client.call("open_worker", {"workflow_id": "wf1", "worker": "../escape"}, WorkerWorktree)
    assert caught.value.code == "bad_request"
    with pytest.raises(RemoteError) as caught:
        await client.call("begin_bead", {"workflow_id": "wf1", "worker": "w1", "bead_id": "b", "attempt": 0}, BeadBegun)
    assert caught.value.code == "bad_request"
    with pytest.raises(RemoteError) as caught:
        await client.call("begin_bead", BeginBead(workflow_id="wf1", worker="w1", bead_id="b1", attempt=1), BeadBegun)
    assert caught.value.code == "not_found"
    with pytest.raises(RemoteError) as caught:
        await client.call("merge_bead", MergeBead(workflow_id="nope", worker="w1", bead_id="b1", attempt=1), BeadMerged)
    assert caught.value.code == "not_found"


def test_a_worker_whose_worktree_went_missing_is_opened_again(engine: GitEngine, repo: Path):
    worktree = open_worker(engine, "w1")
    begin(engine, "w1", "b1")
    (worktree / "a.txt").write_text("a\n")
    done = commit(engine, "w1", "b1", "a")
    shutil.rmtree(worktree)
    assert open_worker(engine, "w1") == worktree
    assert (worktree / "a.txt").read_text() == "a\n"  # the worker branch, as it was
    assert git(worktree, "status", "--porcelain") == "" and git(worktree, "rev-parse", "HEAD") == done.commit
