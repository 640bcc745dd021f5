"""Action links: answering a card awaiting approval from a phone (issue 36, "approve from anywhere").

The notifier announces each ``workflow:approval_needed`` on the configured channels with signed, one-time links
to the gateway (``/act/{token}``): approve, request changes, or stop (end the workflow); each
``workflow:halted`` with resume (for a halt ``resume`` lifts) and stop; with ``notify_blocked_links`` a
``loop:blocked`` notification carries a Stop link. A link names one card (the workflow, its stage and
the workflow version the card was recorded at), one action, the channel it was sent to, an expiry and a nonce;
it is signed with the system's action-link key (``<data dir>/action_links.key``, made like the API token and
readable by the services only, never by an agent). ``GET`` shows what the link does and changes nothing (link
previews fetch it); ``POST`` does it, once. Telegram's inline keyboard answers through the Bot API instead: the
notifier reads the button's callback and redeems the same link.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from .base import Reply
from .http import Text
from .loops import LoopView
from .workflows import Source, WorkflowView

__all__ = ["ActionKind", "ActionLinkErrorCode", "ActionOutcome", "ActionSource", "LinkChangesBody"]

ActionKind = Literal["approve", "request_changes", "stop", "resume", "abandon"]
"""What a link does: ``approve`` a workflow's card, or send it back with feedback (``request_changes``); ``stop``
(abort) a loop session that is blocked, while it still is; ``resume`` a halted workflow, while it still waits at
that halt; ``abandon``: the Stop of a card or a halt, which ends the workflow for good (the orchestrator's
``stop`` only stops a working agent, and nothing works while the workflow waits for the user)."""

ActionSource = Source
"""Where an approval or change request came from: ``api`` (the HTTP API, the UI, the CLI, MCP) or the channel
an action link was sent to. Recorded in ``workflow:stage_changed`` / ``workflow:changes_requested``
(``source``)."""


class ActionLinkErrorCode:
    """Why an action link is refused; nothing is changed by a refused link."""

    MALFORMED = "link_malformed"
    """Not a link this system makes (cut short, not base64, not its fields). HTTP 400."""
    FORGED = "link_forged"
    """The signature does not match: the link was changed, or signed with another key. HTTP 403."""
    EXPIRED = "link_expired"
    """Older than its validity (``notify_link_ttl``). HTTP 410."""
    USED = "link_used"
    """Used already (on any gateway, through Telegram, before a restart: the use is recorded). HTTP 410."""

    STATUS = {MALFORMED: 400, FORGED: 403, EXPIRED: 410, USED: 410}


class LinkChangesBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``POST /act/{token}`` of a request-changes link (JSON or the page's form)."""

    feedback: Text
    """What to change (at least one visible character)."""


class ActionOutcome(Reply, kw_only=True):
    """What a redeemed link did."""

    action: ActionKind
    run_id: str
    """The workflow (the loop session for ``stop``)."""
    stage: str
    """The stage of the card or halt the link answered (``blocked`` for a loop's ``stop``)."""
    source: ActionSource
    """The channel the link was sent to, as recorded in the workflow's event (a stopped session's reason says
    ``stopped from <channel>``)."""
    workflow: WorkflowView | None = None
    """The workflow after the action (approve, request changes, resume, abandon)."""
    loop: LoopView | None = None
    """The loop session after the action (stop)."""
