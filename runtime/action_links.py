"""Signed, one-time action links (``contracts/actions.py``): made by the notifier, redeemed by the gateway (a
phone following the link) or by the notifier itself (a Telegram button's callback), both through :func:`redeem`.

- **Signed** with the key at ``<data dir>/action_links.key``, created on first use like the API token (mode
  0600, ``runtime/token.py``): a file of the services, outside every worktree, so no agent can read or write
  it. It is its own key, not the API token, so the notifier never holds the API token. Replacing the file
  voids every link given out.
- **For one card**: a link carries the run (the workflow; for a blocked loop's Stop, the loop session), the card's
  stage and the version it was recorded at; the orchestrator refuses it (``card_moved_on``) once that card no
  longer waits, in the same lock as the answer.
  A halt's links carry the version the halt was recorded at, and are refused the same way once the workflow
  resumed or halted again; a blocked loop's Stop link carries the iteration it blocked in.
- **For a set time**: its expiry is signed with it.
- **Once**: its nonce is *created* in the JetStream key-value bucket ``AUTARCH_ACTION_LINKS`` (file storage)
  before the action is asked for; creating a key that exists fails on the server, so exactly one use wins on
  every gateway and notifier, and the record survives restarts. A use the orchestrator could not even be asked
  about (``unavailable``, ``timeout``) gives the nonce back, so the link still works later.

A link: ``<base64url of the JSON fields>.<base64url of the HMAC-SHA256>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from nats.aio.client import Client
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from autarch.contracts import subjects
from autarch.contracts.actions import ActionKind, ActionLinkErrorCode, ActionOutcome, ActionSource
from autarch.contracts.errors import ErrorCode, ErrorReply
from autarch.contracts.execution import AbandonWorkflow, ResumeWorkflow
from autarch.contracts.loops import AbortLoop, LoopView
from autarch.contracts.workflows import ApproveWorkflow, RequestChanges, WorkflowView

from .bus import open_key_value
from .errors import RemoteError
from .requests import request
from .token import ensure_token

__all__ = ["BUCKET", "KEY_FILE", "ActionLink", "LinkRefused", "UsedLinks", "key_of", "mint", "redeem", "verify"]

KEY_FILE = "action_links.key"
BUCKET = "AUTARCH_ACTION_LINKS"
MAX_TTL = 30 * 24 * 3600
"""Longest life a link may be given (``notify_link_ttl``); the bucket keeps a use this long."""
_ACTIONS = frozenset(get_args(ActionKind))
_SOURCES = frozenset(get_args(ActionSource))
_RETRY_LATER = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.TIMEOUT})


def key_of(data_dir: Path) -> bytes:
    """The system's action-link key (created on first use)."""
    return ensure_token(data_dir / KEY_FILE).encode()


@dataclass(frozen=True, kw_only=True)
class ActionLink:
    """What a link says (every field is signed)."""

    run_id: str
    """The workflow the card or halt is of; for a blocked loop's ``stop``, the loop session (``contracts.git``'s
    meaning of a run). Signed as ``r``; a link minted before issue 33 signed it as ``w`` and still reads."""
    stage: str
    card_version: int
    action: ActionKind
    channel: ActionSource
    expires_at: int
    nonce: str


class LinkRefused(Exception):
    """A link that does nothing: ``reply`` says why (an ``ActionLinkErrorCode``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.reply = ErrorReply(code=code, message=message)

    @property
    def status(self) -> int:
        return ActionLinkErrorCode.STATUS.get(self.reply.code, 400)


_B64URL = re.compile(r"[A-Za-z0-9_-]+")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _signature(key: bytes, body: str) -> bytes:
    return hmac.new(key, b"action-link|" + body.encode(), hashlib.sha256).digest()


def mint(key: bytes, *, run_id: str, stage: str, card_version: int, action: ActionKind, channel: ActionSource,
         ttl: float, now: float | None = None) -> tuple[str, ActionLink]:
    """A new link (its token and what it says), valid ``ttl`` seconds from ``now``."""
    link = ActionLink(run_id=run_id, stage=stage, card_version=card_version, action=action,
                      channel=channel, expires_at=int((time.time() if now is None else now) + ttl),
                      nonce=secrets.token_urlsafe(12))
    fields = {"r": link.run_id, "s": link.stage, "v": link.card_version, "a": link.action, "c": link.channel,
              "e": link.expires_at, "n": link.nonce}
    body = _b64(json.dumps(fields, separators=(",", ":")).encode())
    return f"{body}.{_b64(_signature(key, body))}", link


def verify(key: bytes, token: str, *, now: float | None = None) -> ActionLink:
    """What ``token`` says, if this system signed it and it has not expired.

    Raises:
        LinkRefused: ``link_malformed``, ``link_forged`` or ``link_expired``.
    """
    body, dot, signature = token.partition(".")
    if not (dot and body and signature and token.isascii() and len(token) <= 2048):
        raise LinkRefused(ActionLinkErrorCode.MALFORMED, "not an action link: expected <fields>.<signature>")
    if not _B64URL.fullmatch(signature):
        raise LinkRefused(ActionLinkErrorCode.MALFORMED, "not an action link: the signature is not base64url")
    # The signature is checked before the fields are even read: nothing a forger wrote is interpreted. It is
    # compared as text, in its one canonical encoding: decoding first would accept other spellings of the same
    # bytes (a 43-character signature carries two spare bits, and a lenient decoder skips stray characters).
    if not hmac.compare_digest(signature, _b64(_signature(key, body))):
        raise LinkRefused(ActionLinkErrorCode.FORGED, "this link was not signed by this system (changed, or made "
                                                      "with another key): it does nothing")
    try:
        fields: Any = json.loads(_unb64(body))
        # ``w`` (the workflow's, or a loop session's, id) is ``r`` in a link minted before issue 33: its signature
        # covers the fields as written then, so it verifies as it did, and reads as today's.
        run = fields["r"] if "r" in fields else fields["w"]
        link = ActionLink(run_id=str(run), stage=str(fields["s"]), card_version=int(fields["v"]),
                          action=fields["a"], channel=fields["c"], expires_at=int(fields["e"]),
                          nonce=str(fields["n"]))
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise LinkRefused(ActionLinkErrorCode.MALFORMED, "the link's fields cannot be read") from None
    if link.action not in _ACTIONS or link.channel not in _SOURCES:
        raise LinkRefused(ActionLinkErrorCode.MALFORMED, f"unknown action {link.action!r} or channel {link.channel!r}")
    if link.expires_at < (time.time() if now is None else now):
        raise LinkRefused(ActionLinkErrorCode.EXPIRED, f"this link expired at {_when(link.expires_at)}; answer the "
                                                       "card in the UI or with the API")
    return link


class UsedLinks:
    """The nonces of the links used on this system (the bucket :data:`BUCKET`)."""

    def __init__(self, nc: Client, *, replicas: int = 1, timeout: float = 5.0) -> None:
        self._nc, self._replicas, self._timeout = nc, replicas, timeout
        self._kv: KeyValue | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await open_key_value(self._nc, BUCKET, replicas=self._replicas, timeout=self._timeout,
                                            ttl=MAX_TTL + 3600, description="Nonces of the action links used")
        return self._kv

    async def claim(self, link: ActionLink) -> None:
        """Mark ``link`` used, or raise ``link_used`` when it was (saying when and how)."""
        kv = await self._bucket()
        record = {"at": time.time(), "action": link.action, "run_id": link.run_id}
        try:
            await kv.create(link.nonce, json.dumps(record).encode())
        except KeyWrongLastSequenceError:
            earlier = await self.used(link.nonce)
            when = f" at {_when(earlier['at'])}" if earlier else ""
            raise LinkRefused(ActionLinkErrorCode.USED, f"this link was used already{when}; it works once") from None

    async def used(self, nonce: str) -> dict[str, Any] | None:
        """The record of ``nonce``'s use; None while unused."""
        kv = await self._bucket()
        try:
            entry = await kv.get(nonce)
        except Exception:  # KeyNotFoundError, KeyDeletedError
            return None
        return json.loads(entry.value) if entry.value else None

    async def release(self, nonce: str) -> None:
        """Give the nonce back (the action could not be asked for): the link works again."""
        kv = await self._bucket()
        await kv.delete(nonce)


async def redeem(nc: Client, key: bytes, token: str, used: UsedLinks, *, partitions: int, timeout: float,
                 feedback: str | None = None, now: float | None = None) -> ActionOutcome:
    """Do what ``token`` says, once.

    Raises:
        LinkRefused: the link is malformed, forged, expired or used (nothing was done).
        RemoteError: the orchestrator refused (``card_moved_on``, ``finished``, …): nothing changed, and the link
            is spent; or did not answer (``unavailable``, ``timeout``): the link still works.
    """
    link = verify(key, token, now=now)
    if link.action == "request_changes" and not (feedback and feedback.strip()):
        raise LinkRefused(ErrorCode.BAD_REQUEST, "a change request needs feedback: say what to change")
    await used.claim(link)
    if link.action == "stop":
        abort = AbortLoop(session_id=link.run_id, reason=f"stopped from {link.channel}",
                          blocked_at=link.card_version)
        try:
            loop = await request(nc, subjects.orchestrator_request("abort_loop", abort, partitions), abort, LoopView,
                                 timeout=timeout, retry_unavailable=timeout)
        except RemoteError as exc:
            if exc.code in _RETRY_LATER:
                await used.release(link.nonce)
            raise
        return ActionOutcome(action="stop", run_id=link.run_id, stage=link.stage, source=link.channel,
                             loop=loop)
    command: ApproveWorkflow | RequestChanges | ResumeWorkflow | AbandonWorkflow
    if link.action == "approve":
        command = ApproveWorkflow(workflow_id=link.run_id, source=link.channel, card_version=link.card_version)
        verb = "approve"
    elif link.action == "resume":
        command = ResumeWorkflow(workflow_id=link.run_id, source=link.channel, halt_version=link.card_version)
        verb = "resume_workflow"
    elif link.action == "abandon":
        command = AbandonWorkflow(workflow_id=link.run_id, version=link.card_version, source=link.channel,
                                  reason=f"stopped from {link.channel}")
        verb = "abandon_workflow"
    else:
        assert feedback is not None
        command = RequestChanges(workflow_id=link.run_id, feedback=feedback, source=link.channel,
                                 card_version=link.card_version)
        verb = "request_changes"
    try:
        # Not retried on a lost reply: the card check refuses a second answer anyway, but one ask is the record.
        view = await request(nc, subjects.orchestrator_request(verb, command, partitions), command, WorkflowView,
                             timeout=timeout, retry_unavailable=timeout)
    except RemoteError as exc:
        if exc.code in _RETRY_LATER:
            await used.release(link.nonce)
        raise
    return ActionOutcome(action=link.action, run_id=link.run_id, stage=link.stage, source=link.channel,
                         workflow=view)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))
