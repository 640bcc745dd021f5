"""The git service over a real nats-server, on real repositories, checked with the git CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import msgspec
import pytest

from autarch.contracts import subjects
from autarch.contracts.git import (
    CheckpointPulse,
    DiffArtifact,
    DiffArtifactRef,
    GetDiffArtifact,
    GetWorkflowBranch,
    ListWorktrees,
    ModifiedTrackedFiles,
    PulseCheckpointed,
    PulseDiff,
    PulseStarted,
    RecoveryCheckpoint,
    RecoveryCheckpointed,
    RegisterRepository,
    RemoveWorktree,
    RepositoryRegistered,
    StartPulse,
    TrackedChanges,
    WorkflowBranchView,
    WorkflowDiff,
    WorktreeList,
    WorktreeRemoved,
)
from autarch.runtime.errors import RemoteError

from .gitcli import GIT_ENV, fsck, git, repo_state


async def start(client, pulse_id: str, workflow_id: str = "wf1") -> PulseStarted:
    return await client.call("start_pulse", StartPulse(run_id=workflow_id, pulse_id=pulse_id), PulseStarted)


async def checkpoint(client, pulse_id: str, summary: str, workflow_id: str = "wf1", **extra) -> PulseCheckpointed:
    return await client.call(
        "checkpoint_pulse",
        CheckpointPulse(run_id=workflow_id, pulse_id=pulse_id, summary=summary, **extra),
        PulseCheckpointed,
    )


async def test_register_is_idempotent_and_reports_the_base(client, user_repo: Path):
    first = await client.register(user_repo)
    again = await client.register(user_repo)
    assert first == again
    assert first.base_commit == git(user_repo, "rev-parse", "main")
    assert first.path == str(user_repo.resolve())


async def test_pulses_become_one_commit_each_on_the_workflow_branch(client, user_repo: Path):
    before = repo_state(user_repo)
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    assert view.head == view.base_commit == git(user_repo, "rev-parse", "main")
    listed = git(user_repo, "worktree", "list", "--porcelain")
    assert f"worktree {worktree}\nHEAD {view.head}\nbranch refs/heads/autarch/wf-1" in listed
    assert git(worktree, "status", "--porcelain") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    # The worktree is a checkout of main's commit, not of the user's edited files.
    assert (worktree / "src/util.py").read_text() == "VALUE = 1\n"
    assert (worktree / "bin/run.sh").stat().st_mode & 0o111

    started = await start(client, "p1")
    assert started.pulse_branch == "autarch/wf-1.pulse-p1"
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1.pulse-p1"
    (worktree / "src/app.py").write_text("def main():\n    return 2\n")
    (worktree / "src/new_module.py").write_text("NEW = True\n")
    (worktree / "docs/guide.md").unlink()
    (worktree / "node_modules").mkdir()
    (worktree / "node_modules/dep.js").write_text("ignored\n")
    (worktree / "build.log").write_text("ignored too\n")
    done = await checkpoint(client, "p1", "feat(app): return two", co_author="Jane Doe <jane@example.com>")
    assert done.files_changed == 3

    await start(client, "p2")
    empty = await checkpoint(client, "p2", "chore: nothing to change")
    assert empty.files_changed == 0

    await start(client, "p3")
    (worktree / "bin/run.sh").chmod(0o644)
    (worktree / "src/link").symlink_to("app.py")
    await checkpoint(client, "p3", "refactor!: drop the exec bit", body="Scripts run through sh now.")

    log = git(user_repo, "log", "--format=%s", "autarch/wf-1").splitlines()
    assert log == ["refactor!: drop the exec bit", "chore: nothing to change", "feat(app): return two", "initial"]
    oneline = git(user_repo, "log", "--oneline", "autarch/wf-1").splitlines()
    assert len(oneline) == 4 and oneline[0].endswith("refactor!: drop the exec bit")
    first = git(user_repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%B", done.commit)
    assert first.startswith("Autarch <autarch@localhost>|Autarch <autarch@localhost>|feat(app): return two")
    assert first.rstrip().endswith("Co-authored-by: Jane Doe <jane@example.com>")
    assert (
        git(user_repo, "rev-parse", f"{empty.commit}^{{tree}}", f"{done.commit}^{{tree}}").splitlines()
        == [git(user_repo, "rev-parse", f"{done.commit}^{{tree}}")] * 2
    )
    assert git(user_repo, "show", "--name-status", "--format=", done.commit).splitlines() == [
        "D\tdocs/guide.md",
        "M\tsrc/app.py",
        "A\tsrc/new_module.py",
    ]
    assert git(user_repo, "ls-tree", "autarch/wf-1", "bin/run.sh").startswith("100644")
    assert git(user_repo, "ls-tree", "autarch/wf-1", "src/link").startswith("120000")
    # Pulse branches are gone, the worktree sits on the workflow branch, clean, ignored files kept.
    assert git(user_repo, "branch", "--list", "autarch/wf-1.pulse-*") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    assert git(worktree, "status", "--porcelain") == ""
    assert (worktree / "node_modules/dep.js").exists()
    # The developer's checkout is exactly as it was, and the repository is sound.
    after = repo_state(user_repo)
    for key in ("head", "status", "index"):
        assert after[key] == before[key], key
    fsck(user_repo)

    state = await client.call("get_workflow_branch", GetWorkflowBranch(run_id="wf1"), WorkflowBranchView)
    assert [p.state for p in state.pulses] == ["succeeded"] * 3 and state.active_pulse is None


async def test_a_retried_checkpoint_answers_with_the_first_commit(client, user_repo: Path):
    view = await client.workflow(user_repo)
    await start(client, "p1")
    (Path(view.worktree_path) / "README.md").write_text("changed\n")
    first = await checkpoint(client, "p1", "docs: reword")
    again = await checkpoint(client, "p1", "docs: reword")
    assert again == first
    assert len(git(user_repo, "log", "--oneline", "autarch/wf-1").splitlines()) == 2


async def test_a_loop_checkpoint_commits_only_when_files_changed(client, user_repo: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    await start(client, "i1")
    (worktree / "README.md").write_text("changed\n")
    (worktree / "notes").mkdir()
    (worktree / "notes/new.md").write_text("new\n")
    first = await checkpoint(client, "i1", "docs: reword", skip_if_unchanged=True)
    assert first.committed and first.paths == ["README.md", "notes/new.md"] and first.files_changed == 2
    assert git(user_repo, "rev-parse", "autarch/wf-1") == first.commit
    # An iteration that changed nothing: no commit, no branch left, the same head; a retry answers the same.
    await start(client, "i2")
    empty = await checkpoint(client, "i2", "chore: nothing", skip_if_unchanged=True)
    assert not empty.committed and empty.commit == first.commit and empty.paths == [] and empty.files_changed == 0
    assert await checkpoint(client, "i2", "chore: nothing", skip_if_unchanged=True) == empty
    assert git(user_repo, "rev-parse", "autarch/wf-1") == first.commit
    assert git(user_repo, "branch", "--list", "autarch/wf-1.pulse-i2") == ""
    # The next iteration starts from the head and its commit follows the first.
    await start(client, "i3")
    (worktree / "README.md").write_text("again\n")
    third = await checkpoint(client, "i3", "docs: again", skip_if_unchanged=True)
    assert git(user_repo, "rev-parse", f"{third.commit}^") == first.commit
    fsck(user_repo)


async def test_recovery_checkpoint_keeps_the_work_on_the_pulse_branch(client, user_repo: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    await start(client, "p1")
    (worktree / "src/app.py").write_text("half done\n")
    (worktree / "wip.txt").write_text("notes\n")
    result = await client.call(
        "recovery_checkpoint",
        RecoveryCheckpoint(run_id="wf1", pulse_id="p1", status="failed", reason="tests kept failing"),
        RecoveryCheckpointed,
    )
    assert result.is_recovery_checkpoint and result.pulse_branch == "autarch/wf-1.pulse-p1"
    assert git(user_repo, "rev-parse", "autarch/wf-1.pulse-p1") == result.commit
    message = git(user_repo, "log", "-1", "--format=%B", result.commit)
    assert "Autarch-Recovery-Checkpoint: true" in message and "tests kept failing" in message
    assert git(user_repo, "rev-parse", f"{result.commit}^") == view.base_commit
    assert git(user_repo, "show", f"{result.commit}:wip.txt") == "notes"
    # The workflow branch did not move; the worktree is back at its head, the WIP file gone.
    assert git(user_repo, "rev-parse", "autarch/wf-1") == view.base_commit
    assert git(worktree, "status", "--porcelain") == ""
    assert git(worktree, "symbolic-ref", "HEAD") == "refs/heads/autarch/wf-1"
    assert (worktree / "src/app.py").read_text() == "def main():\n    return 1\n"
    assert not (worktree / "wip.txt").exists()
    # A retry answers the same; the next pulse starts from the workflow head.
    again = await client.call(
        "recovery_checkpoint",
        RecoveryCheckpoint(run_id="wf1", pulse_id="p1", status="failed"),
        RecoveryCheckpointed,
    )
    assert again == result
    assert (await start(client, "p2")).base_commit == view.base_commit
    fsck(user_repo)


async def test_a_stopped_pulse_without_changes_leaves_no_branch(client, user_repo: Path):
    await client.workflow(user_repo)
    await start(client, "p1")
    result = await client.call(
        "recovery_checkpoint",
        RecoveryCheckpoint(run_id="wf1", pulse_id="p1", status="stopped"),
        RecoveryCheckpointed,
    )
    assert not result.is_recovery_checkpoint and result.commit is None
    assert git(user_repo, "branch", "--list", "autarch/wf-1.pulse-p1") == ""


async def test_a_diff_artifact_stored_before_run_id_still_reads(client, user_repo: Path, git_data_dir: Path):
    """A diff artifact recorded when the git contracts said ``workflow_id`` (before issue 33) is still served, in the
    new shape, both when fetched and when the same diff is asked again."""
    view = await client.workflow(user_repo)
    await start(client, "p1")
    (Path(view.worktree_path) / "README.md").write_text("# Demo\n\nChanged.\n")
    await checkpoint(client, "p1", "docs: a change")
    ref = await client.call("workflow_diff", WorkflowDiff(run_id="wf1"), DiffArtifactRef)
    meta = git_data_dir / "git" / "artifacts" / f"{ref.artifact_id}.json"
    stored = json.loads(meta.read_bytes())
    stored["workflow_id"] = stored.pop("run_id")  # the shape written before the rename
    meta.write_text(json.dumps(stored))

    artifact = await client.call("get_diff_artifact", GetDiffArtifact(artifact_id=ref.artifact_id), DiffArtifact)
    assert artifact.ref == ref and artifact.ref.run_id == "wf1"
    assert await client.call("workflow_diff", WorkflowDiff(run_id="wf1"), DiffArtifactRef) == ref


async def test_diff_artifacts_match_git_and_apply(client, user_repo: Path, tmp_path: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)
    await start(client, "p1")
    (worktree / "src/app.py").write_text("def main():\n    return 2\n\n\ndef extra():\n    pass\n")
    (worktree / "docs/guide.md").unlink()
    (worktree / "no newline.txt").write_text("no newline at the end")
    (worktree / "bin/run.sh").chmod(0o644)
    (worktree / "caf\u00e9.md").write_text("accent\n")
    p1 = await checkpoint(client, "p1", "feat: several kinds of change")
    await start(client, "p2")
    (worktree / "README.md").write_text("# Demo\n\nMore.\n")
    await checkpoint(client, "p2", "docs: more")

    ref = await client.call("workflow_diff", WorkflowDiff(run_id="wf1"), DiffArtifactRef)
    assert ref.from_commit == view.base_commit and ref.to_commit == git(user_repo, "rev-parse", "autarch/wf-1")
    artifact = await client.call("get_diff_artifact", GetDiffArtifact(artifact_id=ref.artifact_id), DiffArtifact)
    expected = subprocess.run(
        ["git", "diff", "--no-renames", "main", "autarch/wf-1"], cwd=user_repo, env=GIT_ENV, capture_output=True
    ).stdout.decode()
    assert artifact.diff == expected
    assert artifact.next_offset is None and ref.size == len(expected)
    numstat = [line.split("\t") for line in git(user_repo, "diff", "--numstat", "main", "autarch/wf-1").splitlines()]
    assert ref.files_changed == len(numstat) == 6
    assert ref.insertions == sum(int(n[0]) for n in numstat if n[0] != "-")
    assert ref.deletions == sum(int(n[1]) for n in numstat if n[1] != "-")
    # The same diff asked again is the same artifact.
    assert await client.call("workflow_diff", WorkflowDiff(run_id="wf1"), DiffArtifactRef) == ref

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--branch", "main", str(user_repo), str(clone))
    (tmp_path / "workflow.diff").write_text(artifact.diff)
    git(clone, "apply", "--check", str(tmp_path / "workflow.diff"))

    pulse = await client.call("pulse_diff", PulseDiff(run_id="wf1", pulse_id="p1"), DiffArtifactRef)
    assert (pulse.from_commit, pulse.to_commit) == (view.base_commit, p1.commit)
    pages, offset = [], 0
    while offset is not None:
        page = await client.call(
            "get_diff_artifact", GetDiffArtifact(artifact_id=pulse.artifact_id, offset=offset, limit=100), DiffArtifact
        )
        pages.append(page.diff)
        offset = page.next_offset
    assert len(pages) > 1
    whole = "".join(pages)
    assert whole == git(user_repo, "diff", "--no-renames", view.base_commit, p1.commit) + "\n"


async def test_modified_tracked_files_is_the_preflight_guard(client, user_repo: Path):
    view = await client.workflow(user_repo)
    worktree = Path(view.worktree_path)

    async def guard() -> TrackedChanges:
        return await client.call("modified_tracked_files", ModifiedTrackedFiles(run_id="wf1"), TrackedChanges)

    assert (await guard()).clean
    # Preflight may create untracked artifacts (ignored or not): that is allowed.
    (worktree / "node_modules").mkdir()
    (worktree / "node_modules/x.js").write_text("x")
    (worktree / "generated.txt").write_text("untracked output\n")
    assert (await guard()).clean
    (worktree / "src/app.py").write_text("edited by an install script\n")
    (worktree / "docs/guide.md").unlink()
    report = await guard()
    assert not report.clean
    assert {(f.path, f.change) for f in report.files} == {("src/app.py", "modified"), ("docs/guide.md", "deleted")}
    git(worktree, "checkout", "--", "src/app.py", "docs/guide.md")
    assert (await guard()).clean


async def test_worktrees_are_listed_and_removed(client, user_repo: Path):
    view = await client.workflow(user_repo)
    other = await client.workflow(user_repo, workflow_id="wf2", branch="autarch/wf-2")
    listed = await client.call("list_worktrees", ListWorktrees(repository_id=view.repository_id), WorktreeList)
    assert {(w.run_id, w.branch) for w in listed.items} == {("wf1", "autarch/wf-1"), ("wf2", "autarch/wf-2")}

    removed = await client.call("remove_worktree", RemoveWorktree(run_id="wf1"), WorktreeRemoved)
    assert removed.removed and removed.deleted_branches == []
    assert view.worktree_path not in git(user_repo, "worktree", "list")
    assert not Path(view.worktree_path).exists()
    assert git(user_repo, "rev-parse", "autarch/wf-1") == view.base_commit  # the product stays
    again = await client.call("remove_worktree", RemoveWorktree(run_id="wf1"), WorktreeRemoved)
    assert not again.removed

    # An abandoned workflow: worktree and branches go.
    await start(client, "p1", workflow_id="wf2")
    (Path(other.worktree_path) / "wip.txt").write_text("x\n")
    (Path(other.worktree_path) / "README.md").write_text("dirty\n")
    gone = await client.call(
        "remove_worktree", RemoveWorktree(run_id="wf2", force=True, delete_branches=True), WorktreeRemoved
    )
    assert gone.removed and set(gone.deleted_branches) == {"autarch/wf-2", "autarch/wf-2.pulse-p1"}
    assert git(user_repo, "branch", "--list", "autarch/*") == "autarch/wf-1"
    assert git(user_repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    listed = await client.call("list_worktrees", ListWorktrees(repository_id=view.repository_id), WorktreeList)
    assert listed.items == []
    fsck(user_repo)


async def test_start_pulse_brings_the_worktree_to_a_moved_workflow_head(client, user_repo: Path):
    view = await client.workflow(user_repo)
    # Someone advances the workflow branch (e.g. a reviewer's fix-up) while no pulse runs.
    tree = git(user_repo, "rev-parse", "feature^{tree}")
    fixup = git(user_repo, "commit-tree", tree, "-p", view.base_commit, "-m", "fix: reviewer")
    (Path(view.worktree_path) / "ignored.log").write_text("kept\n")
    git(user_repo, "update-ref", "refs/heads/autarch/wf-1", fixup, view.base_commit)
    started = await start(client, "p1")
    assert started.base_commit == fixup
    assert git(Path(view.worktree_path), "status", "--porcelain") == ""


async def test_every_git_verb_is_served(nc, client):
    info = msgspec.json.decode((await nc.request("$SRV.INFO.git", b"", timeout=5)).data)
    assert sorted(e["name"] for e in info["endpoints"]) == sorted(subjects.GIT_VERBS)
    assert {e["subject"] for e in info["endpoints"]} == {subjects.request("git", v) for v in subjects.GIT_VERBS}


async def test_register_without_a_base_branch_takes_the_checked_out_one(client, user_repo: Path):
    git(user_repo, "checkout", "-q", "-b", "trunk")
    registered = await client.call("register_repository",
                                   RegisterRepository(path=str(user_repo), base_branch=None), RepositoryRegistered)
    assert registered.base_branch == "trunk" and registered.base_commit == git(user_repo, "rev-parse", "trunk")
    git(user_repo, "checkout", "-q", "--detach")
    with pytest.raises(RemoteError) as refused:
        await client.call("register_repository", RegisterRepository(path=str(user_repo), base_branch=None),
                          RepositoryRegistered)
    assert refused.value.code == "base_branch_missing" and "detached HEAD" in refused.value.message
