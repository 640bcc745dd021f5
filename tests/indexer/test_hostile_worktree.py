"""The indexer's walk of a worktree an agent made hostile (issue 32's audit; docs/security.md).

A pulse's worktree is indexed and searched while the agent works in it. Whatever it left there — a link to a
secret outside, a FIFO (even as ``.gitignore``), a socket, a link loop, a sparse file of gigabytes, odd names,
nesting deeper than Python recurses, a rewritten ``.git`` — the walk must finish, and nothing from outside the
worktree may reach the index (whose snippets are shown to a model).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from autarch.contracts.indexer import SemanticSearch
from autarch.runtime.ignore import git_exclude_path
from autarch.runtime.walk import walk
from autarch.runtime.worktree_files import remove_tree
from autarch.services.indexer.engine import Indexer
from autarch.services.indexer.repository import locate_project, worktree_location
from autarch.services.indexer.walker import walk_worktree

from .conftest import git, make_repo

SECRET = "zanzibar_outside_secret_token"


@pytest.fixture(autouse=True)
def _remove_deep_trees(tmp_path: Path):
    """Remove what the test made: pytest's own clean-up (``shutil.rmtree``) fails on a tree 1,000 levels deep."""
    yield
    remove_tree(tmp_path)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.py").write_text(f"def {SECRET}():\n    return 'do not index me'\n")
    return path


def _links(wt: Path, outside: Path) -> None:
    (wt / "leak.py").symlink_to(outside / "secret.py")
    (wt / "leakdir").symlink_to(outside, target_is_directory=True)
    (wt / "loop-a").symlink_to("loop-b")
    (wt / "loop-b").symlink_to("loop-a")


def _fifos_and_sockets(wt: Path, _outside: Path) -> None:
    os.mkfifo(wt / "pipe.py")
    os.mkfifo(wt / "app" / ".gitignore")  # read as an ignore file, it would block the walk forever
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(wt / "sock.py"))
    server.close()


def _sparse(wt: Path, _outside: Path) -> None:
    with open(wt / "huge.py", "wb") as f:
        f.truncate(5 << 30)  # 5 GiB, no disk: must be skipped by its size, never read
    with open(wt / ".gitignore", "ab") as f:
        f.truncate(5 << 30)  # an ignore file of 5 GiB is read as no rules


def _odd_names(wt: Path, _outside: Path) -> None:
    root = os.fsencode(wt)
    for name in (b"new\nline.py", b"bad-\xff.py", b"-rf.py", b"Case.py", b"case.py"):
        with open(root + b"/" + name, "wb") as f:
            f.write(b"def odd_name_function():\n    return 1\n")


def _deep(wt: Path, _outside: Path) -> None:
    deep = os.fsencode(wt / "deep")
    os.mkdir(deep)
    for _ in range(1200):
        deep += b"/d"
        os.mkdir(deep)
    with open(deep + b"/bottom.py", "wb") as f:
        f.write(b"def bottom_of_the_tree():\n    return 1\n")


def _nested_git(wt: Path, outside: Path) -> None:
    nested = wt / "vendor"
    nested.mkdir()
    git(nested, "init", "-q")
    (nested / "vendored.py").write_text("def vendored():\n    return 1\n")


CASES: dict[str, Callable[[Path, Path], None]] = {
    "links": _links,
    "fifos_and_sockets": _fifos_and_sockets,
    "sparse_5_gib": _sparse,
    "odd_names": _odd_names,
    "deep_nesting": _deep,
    "nested_git": _nested_git,
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_worktree_is_indexed_without_hanging_or_leaking(
    indexer: Indexer, repo: Path, tmp_path: Path, outside: Path, case: str
) -> None:
    project = indexer.index_project(str(repo))
    wt = tmp_path / "pulse-1"
    git(repo, "worktree", "add", "-q", "-b", "pulse-1", str(wt))
    CASES[case](wt, outside)

    walked = walk_worktree(worktree_location(locate_project(repo), wt))
    paths = {f.path for f in walked.files}
    assert not any(p.startswith(("leak", "loop", "pipe", "sock", "huge", "vendor/")) for p in paths), paths
    assert all(f.content is None or SECRET.encode() not in f.content for f in walked.files)
    result = indexer.index_worktree(project.project, str(wt))
    assert result.state == "ready"
    hits = indexer.search(SemanticSearch(query=SECRET, root=str(wt), max_results=20))
    assert all(SECRET not in hit.snippet for hit in hits.results)
    if case == "sparse_5_gib":
        assert walked.skipped["too_large"] >= 1
    if case == "fifos_and_sockets":
        assert walked.skipped["not_a_file"] == 3  # pipe.py, sock.py, app/.gitignore
    if case == "deep_nesting":
        assert "deep/" + "/".join(["d"] * 1200) + "/bottom.py" in paths
    if case == "odd_names":
        assert {"-rf.py", "Case.py", "case.py", "new\nline.py"} <= paths
        assert walked.skipped["undecodable_name"] == 1


def test_a_rewritten_dot_git_names_no_exclude_file_and_no_repository(tmp_path: Path, repo: Path) -> None:
    wt = tmp_path / "pulse-1"
    git(repo, "worktree", "add", "-q", "-b", "pulse-1", str(wt))
    # Only a real .git directory names an exclude file: a linked worktree's .git file is never followed, even when
    # it is git's own (its walks take the common directory from the records).
    assert git_exclude_path(str(repo)) == str(repo / ".git" / "info" / "exclude")
    assert git_exclude_path(str(wt)) is None

    # A gitdir the agent made, whose commondir points at another directory's info/exclude.
    fake = wt / "fake"
    fake.mkdir()
    (fake / "gitdir").write_text(f"{wt / '.git'}\n")
    (fake / "commondir").write_text(f"{tmp_path / 'elsewhere'}\n")
    (fake / "HEAD").write_text("ref: refs/heads/main\n")
    (wt / ".git").write_text(f"gitdir: {fake}\n")
    assert git_exclude_path(str(wt)) is None
    # Another repository's administrative directory does not name this worktree back.
    other = make_repo(tmp_path / "other")
    git(other, "worktree", "add", "-q", "-b", "o", str(tmp_path / "other-wt"))
    (wt / ".git").write_text(f"gitdir: {other / '.git' / 'worktrees' / 'other-wt'}\n")
    assert git_exclude_path(str(wt)) is None
    # A FIFO or a link as .git: never opened (a FIFO would block).
    (wt / ".git").unlink()
    os.mkfifo(wt / ".git")
    assert git_exclude_path(str(wt)) is None
    assert list(walk(str(wt), max_depth=1)) != []
    (wt / ".git").unlink()
    (wt / ".git").symlink_to(other / ".git")
    assert git_exclude_path(str(wt)) is None


def test_a_rewritten_dot_git_redirects_nothing_the_project_records_decide(indexer: Indexer, tmp_path: Path) -> None:
    """The indexer never reads a worktree's ``.git``: whatever an agent writes there (another repository's
    directories, ``/root``, garbage, a FIFO, a link), the worktree is indexed as its project's repository records
    it, with that repository's ``info/exclude``, and nothing from around the worktree reaches the index."""
    from autarch.runtime.errors import ServiceFailure

    # The worktree sits inside another repository (a home directory kept in git, say) holding a secret, whose
    # info/exclude would hide the worktree's app/ if it were taken.
    home = make_repo(tmp_path / "home", {"notes.py": f"def {SECRET}():\n    pass\n"})
    (home / ".git" / "info").mkdir(exist_ok=True)
    (home / ".git" / "info" / "exclude").write_text("app/\n")
    project = make_repo(home / "project")
    (project / ".git" / "info").mkdir(exist_ok=True)
    (project / ".git" / "info" / "exclude").write_text("local_only.py\n")
    registered = indexer.index_project(str(project))
    wt = home / "worktrees" / "pulse-1"
    git(project, "worktree", "add", "-q", "-b", "pulse-1", str(wt))
    (wt / "local_only.py").write_text("def excluded_by_the_project():\n    return 1\n")
    other = make_repo(tmp_path / "other", {"x.py": "x = 1\n"})
    git(other, "worktree", "add", "-q", "-b", "o", str(tmp_path / "other-wt"))
    other_admin = other / ".git" / "worktrees" / "other-wt"
    # Another repository's administrative directory, told to name this worktree back, as an agent would want.
    (other_admin / "gitdir").write_text(f"{wt / '.git'}\n")

    def rewrite(content: str | None) -> None:
        dot_git = wt / ".git"
        if dot_git.is_symlink() or dot_git.exists():
            dot_git.unlink()
        if content == "fifo":
            os.mkfifo(dot_git)
        elif content == "link":
            dot_git.symlink_to(other / ".git")
        elif content is not None:
            dot_git.write_text(content)

    for garbage in (f"gitdir: {other_admin}\n", "gitdir: /root\n", f"gitdir: {home / '.git'}\n",
                    "not a git file\n", "fifo", "link", None):
        rewrite(garbage)
        location = worktree_location(locate_project(project), wt)
        assert (location.root, location.common_dir) == (wt, project / ".git"), garbage
        assert location.git_dir == (project / ".git" / "worktrees" / "pulse-1").resolve()
        result = indexer.index_worktree(registered.project, str(wt))
        assert (result.state, result.root, result.project) == ("ready", str(wt), registered.project)
        paths = set(indexer.store.scope_files(registered.project, result.scope))
        assert "app/auth.py" in paths, garbage  # home's info/exclude was not taken
        assert "local_only.py" not in paths and "notes.py" not in paths, garbage
        hits = indexer.search(SemanticSearch(query=SECRET, root=str(wt), max_results=20))
        assert all(SECRET not in hit.snippet and hit.file_path != "notes.py" for hit in hits.results)
        assert indexer.status(root=str(wt)).scopes[0].scope == result.scope

    # A worktree of another repository, its .git pointed into this project's records, is not this project's.
    (tmp_path / "other-wt" / ".git").write_text(f"gitdir: {project / '.git' / 'worktrees' / 'pulse-1'}\n")
    with pytest.raises(ServiceFailure) as caught:
        indexer.index_worktree(registered.project, str(tmp_path / "other-wt"))
    assert caught.value.code == "bad_request"
    with pytest.raises(ServiceFailure) as caught:
        indexer.search(SemanticSearch(query="x", root=str(tmp_path / "other-wt")))
    assert caught.value.code == "not_indexed"
    # A project is only a repository's own .git directory, never what a .git file names; nor does the search climb
    # on to the home repository around it.
    rewrite(f"gitdir: {project / '.git'}\n")
    for target in (wt, tmp_path / "other-wt"):
        with pytest.raises(ServiceFailure) as caught:
            indexer.index_project(str(target))
        assert caught.value.code == "not_a_repository"
