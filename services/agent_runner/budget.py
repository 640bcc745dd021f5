"""Per-workflow model budgets (tokens and US dollars), checked before every model call."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from autarch.contracts.agents import TurnUsage

__all__ = ["WorkflowBudget"]


@dataclass
class WorkflowBudget:
    """Running totals per workflow over all its sessions, and the limits they must stay under."""

    token_limit: int | None = None
    """Input, output, cache read and cache write tokens together; None: no limit."""
    cost_limit: float | None = None
    """US dollars at list prices; None: no limit."""
    tokens: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    cost: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, workflow_id: str | None, usage: TurnUsage, cost_usd: float) -> None:
        """Count one model reply against its workflow (channel sessions have no workflow budget)."""
        self.add_spent(workflow_id, usage.input_tokens + usage.output_tokens + usage.cache_read_input_tokens
                       + usage.cache_creation_input_tokens, cost_usd)

    def add_spent(self, workflow_id: str | None, tokens: int, cost_usd: float) -> None:
        """Count a session's spend, summed already (a kept session's, ``kept.py``), against its workflow."""
        if workflow_id is None:
            return
        self.tokens[workflow_id] += tokens
        self.cost[workflow_id] += cost_usd

    def exceeded(self, workflow_id: str | None) -> str | None:
        """Why the workflow may not call the model again, or None while it is within budget."""
        if workflow_id is None:
            return None
        if self.token_limit is not None and self.tokens[workflow_id] >= self.token_limit:
            return f"workflow used {self.tokens[workflow_id]} tokens of its {self.token_limit} token budget"
        if self.cost_limit is not None and self.cost[workflow_id] >= self.cost_limit:
            return f"workflow spent ${self.cost[workflow_id]:.4f} of its ${self.cost_limit:.2f} budget"
        return None
