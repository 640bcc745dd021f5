"""``autarch demo --swarm``: the workflow demo on a bead plan, whose execution runs as a swarm (seed 002).

The bundled ``swarm`` scenario plans six beads on a tiny geometry package: a diamond (base → square, circle →
summary; square and circle both register in ``shapes/registry.py``, so their file leases make them take
turns) and two independent notes. Three workers (``AUTARCH_SWARM_WORKERS=3``), each an agent session in its own
worktree, claim ready beads, lease their files, verify, and land one ``feat(<bead>): …`` commit each on the
workflow branch. Everything else is :func:`.demo_cmd.run_demo`: the cards are approved, the events are shown
as ``autarch watch`` shows them, and the branch's log ends the run, here followed by the beads.
"""

from __future__ import annotations

from .demo_kit import DemoKind
from .gateway_client import GatewayClient
from .workflow_cmd import bead_rows, epic_get

__all__ = ["BRANCH", "REQUEST", "SWARM", "TITLE", "WORKERS", "bead_lines"]

TITLE = "Shapes with areas"
REQUEST = ("Add a Shape base class, square and circle shapes registered in shapes/registry.py, a total-area "
           "summary, and notes on units and naming")
BRANCH = "autarch/shapes"
WORKERS = 3
"""The scenario's plan is three beads wide at the start: one worker each."""


def bead_lines(client: GatewayClient, workflow_id: str) -> list[str]:
    """The epic's beads (``GET /api/beads``), a row each; nothing when the gateway has no epic for it."""
    listing = epic_get(client, "/api/beads", workflow_id)
    rows = bead_rows([b for b in (listing or {}).get("beads") or [] if isinstance(b, dict)])
    return ["Beads:", *(f"  {row}" for row in rows)] if rows else []


SWARM = DemoKind(scenario="swarm", title=TITLE, request=REQUEST, branch=BRANCH,
                 headline=f"a bead plan run by a swarm of {WORKERS} workers",
                 env={"AUTARCH_SWARM_WORKERS": str(WORKERS)}, unit="bead", epilogue=bead_lines)
"""What ``autarch demo --swarm`` plays."""
