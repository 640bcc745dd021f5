"""Loop sessions' commands and queries: one command per session at a time, a read model of every session's view.

The loop verbs (``start_loop`` … ``abort_loop``) are served here. A start is checked before anything is
recorded: the repository is registered and the session's branch and worktree made by the git service, and an
explicit anchor is looked up in the turn memory, so a bad path, branch or anchor is a typed error at once, not
a failed session after paid iterations. The session is then recorded ``pending``: the driver prepares its first
iteration (the anchor, the prompt, the iteration's worktree), whose start makes it ``running``.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec

from autarch.contracts import orchestrator_tools as fx
from autarch.contracts import subjects
from autarch.contracts.errors import ErrorCode
from autarch.contracts.git import (
    CreateWorkflowBranch,
    GitErrorCode,
    RegisterRepository,
    RepositoryRegistered,
    WorkflowBranchView,
)
from autarch.contracts.loops import (
    ITERATIONS_PER_VIEW,
    AbortLoop,
    ForkLoop,
    GetLoop,
    ListLoops,
    LoopErrorCode,
    LoopList,
    LoopView,
    PauseLoop,
    ResumeLoop,
    StartLoop,
    missing_address,
)
from autarch.contracts.turns import FindTurn, SearchTurns, TurnFound, TurnHits
from autarch.runtime.errors import RemoteError, ServiceFailure
from autarch.runtime.micro import TypedService
from autarch.runtime.requests import request
from autarch.runtime.settings import OrchestratorSettings

from ..application import WorkflowApplication
from ..book import Book, ignore
from ..kept_views import KeptViews, view_shape
from ..writer import BatchedWriter
from .forks import forked_history, loop_fork_point
from .model import LoopSession
from .views import Made, older_in, older_iterations, page_of, summary_of, view_of

__all__ = ["LoopBook", "register_loops"]

R = TypeVar("R")


log = logging.getLogger("orchestrator.loops")


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class LoopBook:
    """Handles each loop session's commands one at a time and keeps every session's current view."""

    app: WorkflowApplication
    writer: BatchedWriter
    nc: Any
    settings: OrchestratorSettings
    views: dict[str, LoopView] = field(default_factory=dict)
    kick: Callable[[str], None] = ignore
    """Wakes the loop driver for a session whose state changed (``ignore``: nobody drives them)."""
    unsettled: list[str] = field(default_factory=list)
    """Sessions that, when the views were loaded, still had work for the driver."""
    from_kept: int = 0
    """How many views the last :meth:`load_views` took from the kept views (the others were replayed)."""
    kept: KeptViews = field(default_factory=lambda: KeptViews(None))
    """The views of settled sessions kept on disk, which a start-up reads instead of replaying them
    (``kept_views.py``; by default none)."""
    book: Book[LoopSession] = field(init=False)
    _made: dict[str, Made] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        # The latest state of each session is kept between reads (``latest.py``): a driver step reads its session
        # several times, and a session of a thousand iterations is not rebuilt for each of them.
        self.book = Book(app=self.app, writer=self.writer, kind=LoopSession, noun="loop session",
                         id_field="session_id", on_change=self._changed, keep=1024, inline_reads=self.writer.inline,
                         log=log)

    def _changed(self, session: LoopSession) -> None:
        self._remember(session)
        self.kick(str(session.id))

    def load_views(self, owns: Callable[[str], bool] = lambda _: True) -> None:
        """Rebuild the views of the loop sessions ``owns`` (this partition's; by default all): a settled
        session's from its kept view when nothing was recorded since, any other from its events."""
        kept = self.kept.current("loop", LoopView, _SHAPE)
        for session_id in filter(owns, self.app.loop_ids()):
            view = kept.get(session_id)
            if view is not None:
                self.from_kept += 1
                self.views[session_id] = view
                continue
            session = self.book.rebuild(session_id)  # kept only once the driver or a command reads it
            self._remember(session)
            if not session.settled:
                self.unsettled.append(session_id)

    def _remember(self, session: LoopSession) -> LoopView:
        # The iterations' views are made again only for the iterations that changed (``view_of``).
        view = view_of(session, self._made.setdefault(str(session.id), Made()))
        self.views[view.id] = view
        if session.settled:
            self.kept.put("loop", view.id, session.version, _SHAPE, view)
            self._made.pop(view.id, None)  # a settled session's iterations change no more
        return view

    def is_loop(self, some_id: str) -> bool:
        try:
            return str(uuid.UUID(some_id)) in self.views
        except ValueError:
            return False

    async def read(self, session_id: str) -> LoopSession:
        return await self.book.read(session_id)

    async def change(self, session_id: str, command: Callable[[LoopSession], R]) -> tuple[LoopSession, R]:
        """Run ``command`` on the session under its lock and save what it recorded; (session, its result)."""
        return await self.book.change(session_id, command)

    async def page(self, view: LoopView, first: int | None = None, limit: int = ITERATIONS_PER_VIEW, *,
                   session: LoopSession | None = None) -> LoopView:
        """The reply of ``view``'s page (``page_of``) as a state holding every iteration makes it: the iterations
        older than those the state holds (``LoopSession.iterations_kept``; none on the default page) are made from
        their own events, with the session's state (kept, or its snapshot and later events) to find them."""
        reply = page_of(view, first, limit)
        older = older_in(view, first, limit)
        if not older:
            return reply
        if session is None:
            session = await self.read(view.id)
        made = (older_iterations(self.app, session, older) if self.writer.inline
                else await asyncio.to_thread(older_iterations, self.app, session, older))
        return msgspec.structs.replace(reply, iterations=made + reply.iterations)

    # --- verbs ---------------------------------------------------------------------------------------

    async def start_loop(self, cmd: StartLoop) -> LoopView:
        limit = self.settings.loop_max_iterations_limit
        if cmd.max_iterations > limit:
            raise ServiceFailure.bad_request(
                f"maxIterations {cmd.max_iterations} is more than this installation allows ({limit}; setting "
                "loop_max_iterations_limit)", field="max_iterations", limit=limit)
        for target in cmd.notify:
            if (missing := missing_address(target)) is not None:
                raise ServiceFailure.bad_request(missing, field="notify")
        async with self.book.lock(cmd.session_id):
            existing = self.views.get(cmd.session_id)
            if existing is not None:
                if (existing.project_path, existing.goal, existing.max_iterations) != (
                        cmd.project_path, cmd.goal, cmd.max_iterations):
                    raise ServiceFailure.conflict(f"loop session {cmd.session_id} already exists with other fields",
                                                  session_id=cmd.session_id)
                return await self.page(existing)
            if cmd.anchor_turn_id is not None:
                await self._check_anchor(cmd.anchor_turn_id, cmd.project_path)
            branch_name = cmd.branch_name or f"autarch/loop-{cmd.session_id[:8]}"
            repo = await self._git("register_repository",
                                   RegisterRepository(path=cmd.project_path, base_branch=cmd.base_branch),
                                   RepositoryRegistered)
            branch = await self._git("create_workflow_branch",
                                     CreateWorkflowBranch(run_id=cmd.session_id, repository_id=repo.repository_id,
                                                          branch=branch_name, base_branch=repo.base_branch),
                                     WorkflowBranchView)
            now = _now()
            session = LoopSession(
                session_id=cmd.session_id, project_name=cmd.project_name, project_path=repo.path, goal=cmd.goal,
                max_iterations=cmd.max_iterations, anchor_turn_id=cmd.anchor_turn_id, branch_name=branch.branch,
                base_branch=repo.base_branch, context_strategy=cmd.context_strategy,
                notify=[msgspec.to_builtins(n) for n in cmd.notify], created_by=cmd.created_by, script=cmd.script,
                created_at=now, max_tokens=cmd.max_tokens, max_cost_usd=cmd.max_cost_usd, status="pending")
            session.branch_prepared(branch=branch.branch, worktree_path=branch.worktree_path,
                                    base_commit=branch.base_commit, repository_id=repo.repository_id, at=now)
            await self.book.save(cmd.session_id, session)
        return self.views[str(session.id)]

    async def fork_loop(self, cmd: ForkLoop) -> LoopView:
        """Make ``cmd.session_id`` a fork of ``cmd.forked_from`` after its iteration ``cmd.at_iteration``
        (``forks.py``); the original is only read. A repeated fork answers the recorded one."""
        key, forked_from = self.book.key(cmd.session_id), self.book.key(cmd.forked_from)
        cmd = msgspec.structs.replace(cmd, session_id=key, forked_from=forked_from)
        async with self.book.lock(key):
            existing = self.views.get(key)
            if existing is not None:
                if (existing.forked_from, existing.forked_at_iteration) != (forked_from, cmd.at_iteration):
                    raise ServiceFailure.conflict(f"loop session {key} already exists and is not this fork",
                                                  session_id=key)
                return await self.page(existing)
            point = await asyncio.to_thread(loop_fork_point, self.app, cmd)
            repo = await self._git("register_repository",
                                   RegisterRepository(path=point.project_path, base_branch=point.base_branch),
                                   RepositoryRegistered)
            # Cut where the original's branch was after iteration K (a retry finds the branch this fork made).
            branch = await self._git("create_workflow_branch",
                                     CreateWorkflowBranch(run_id=key, repository_id=repo.repository_id,
                                                          branch=cmd.branch_name or f"autarch/loop-{key[:8]}",
                                                          base_branch=repo.base_branch,
                                                          start_commit=point.start_commit,
                                                          base_commit=point.base_commit),
                                     WorkflowBranchView)
            fork = await asyncio.to_thread(forked_history, self.app, forked_from, key, point.version)
            fork._forked(forked_from=forked_from, at_iteration=cmd.at_iteration,
                         branch={"branch": branch.branch, "worktree_path": branch.worktree_path,
                                 "base_commit": branch.base_commit, "repository_id": repo.repository_id},
                         script=cmd.script if cmd.script is not None else point.script,
                         closed=[it.number for it in fork.iterations if not it.session_closed], at=_now())  # those held
            await self.book.save(key, fork)
        return await self.page(self.views[key])

    async def _check_anchor(self, turn_id: str, project_path: str) -> None:
        try:
            found = await request(self.nc, subjects.request("indexer", "find_turn"),
                                  FindTurn(turn_id=turn_id, project_path=project_path), TurnFound,
                                  timeout=self.settings.request_timeout)
        except RemoteError as exc:
            raise ServiceFailure(LoopErrorCode.MEMORY_UNAVAILABLE,
                                 f"the anchor {turn_id} cannot be checked: the turn memory (indexer) answered "
                                 f"{exc.code}: {exc.message}", {"anchor_turn_id": turn_id}) from None
        if found.turn is None:
            raise ServiceFailure(LoopErrorCode.UNKNOWN_ANCHOR,
                                 f"no recorded turn {turn_id} in {project_path}: anchorTurnId must name a turn of "
                                 "this project", {"anchor_turn_id": turn_id, "field": "anchor_turn_id"})

    async def _git(self, verb: str, payload: msgspec.Struct, reply: type[R]) -> R:
        try:
            return await request(self.nc, subjects.request("git", verb), payload, reply,
                                 timeout=self.settings.git_request_timeout, retry_unavailable=2.0, idempotent=True)
        except RemoteError as exc:
            code = exc.code
            if code == GitErrorCode.NOT_A_REPOSITORY:
                code = LoopErrorCode.NOT_A_REPOSITORY
            raise ServiceFailure(code, exc.message, dict(exc.reply.details or {})) from None

    async def search_history(self, query: fx.SearchHistory) -> fx.HistoryHits:
        """An iteration's ``search_history`` tool: the turn memory searched within the session's project."""
        session_id = query.session_id
        view = self.views.get(session_id)
        if view is None:
            raise ServiceFailure.not_found(f"no loop session {session_id}", session_id=session_id)
        hits = await request(self.nc, subjects.request("indexer", "search_turns"),
                             SearchTurns(project_path=view.project_path, query=query.query,
                                         limit=max(1, min(query.limit, 20))), TurnHits,
                             timeout=self.settings.request_timeout)
        # The turn memory's conversation of a loop turn is its session, and the iteration its position in it.
        return fx.HistoryHits(items=[fx.HistoryHit(turn_id=h.turn_id,
                                                   iteration=h.index + 1 if h.session_id == view.id else None,
                                                   score=h.score, excerpt=h.excerpt) for h in hits.items])

    async def get_loop(self, query: GetLoop) -> LoopView:
        view = self.views.get(query.session_id)
        if view is None:
            raise ServiceFailure.not_found(f"no loop session {query.session_id}", session_id=query.session_id)
        return await self.page(view, query.iterations_from, query.iterations_limit)

    async def list_loops(self, query: ListLoops) -> LoopList:
        items = [summary_of(v) for v in self.views.values() if query.status is None or v.status == query.status]
        return LoopList(items=items[query.offset: query.offset + query.limit], total=len(items))

    async def pause_loop(self, cmd: PauseLoop) -> LoopView:
        session, _ = await self.change(cmd.session_id, LoopSession.request_pause)
        return await self.page(view_of(session), session=session)

    async def resume_loop(self, cmd: ResumeLoop) -> LoopView:
        session, _ = await self.change(cmd.session_id, lambda s: s.resume(cmd.message))
        return await self.page(view_of(session), session=session)



Abort = Callable[[str, str, int | None], Awaitable[LoopSession]]
"""Stops a session now, cancelling its running turn: ``(session id, reason, blocked_at)`` (``LoopDriver.abort``)."""


def register_loops(service: TypedService, book: LoopBook, abort: Abort | None = None) -> None:
    """Add the loop verbs to the orchestrator's service; ``abort`` comes from the driver that runs the sessions
    (None: this orchestrator records commands only, so an abort, which stops a running agent, is ``unavailable``)."""

    async def abort_loop(cmd: AbortLoop) -> LoopView:
        if abort is None:
            raise ServiceFailure(ErrorCode.UNAVAILABLE, "this orchestrator does not drive loop sessions")
        session = await abort(cmd.session_id, cmd.reason, cmd.blocked_at)
        return await book.page(view_of(session), session=session)

    service.endpoint("start_loop", StartLoop, book.start_loop)
    service.endpoint("get_loop", GetLoop, book.get_loop)
    service.endpoint("list_loops", ListLoops, book.list_loops)
    service.endpoint("pause_loop", PauseLoop, book.pause_loop)
    service.endpoint("resume_loop", ResumeLoop, book.resume_loop)
    service.endpoint("abort_loop", AbortLoop, abort_loop)
    service.endpoint("fork_loop", ForkLoop, book.fork_loop)
    service.endpoint(fx.SEARCH_HISTORY_VERB, fx.SearchHistory, book.search_history)


_SHAPE = view_shape(view_of, LoopView, LoopSession)
"""The code a kept view of a loop is made by (``kept_views.view_shape``)."""
