"""Per-run model budgets, in tokens and US dollars (a run: a workflow or a loop session), checked before every
model call."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from autarch.contracts.agents import TurnUsage

__all__ = ["WorkflowBudget"]


@dataclass
class WorkflowBudget:
    """Running totals per run (a workflow or a loop session) over all its sessions, and the limits they must stay
    under."""

    token_limit: int | None = None
    """Input, output, cache read and cache write tokens together; None: no limit."""
    cost_limit: float | None = None
    """US dollars at list prices; None: no limit."""
    tokens: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    cost: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, run_id: str | None, usage: TurnUsage, cost_usd: float) -> None:
        """Count one model reply against its run, a workflow or a loop session (channel sessions have no budget)."""
        self.add_spent(run_id, usage.input_tokens + usage.output_tokens + usage.cache_read_input_tokens
                       + usage.cache_creation_input_tokens, cost_usd)

    def add_spent(self, run_id: str | None, tokens: int, cost_usd: float) -> None:
        """Count a session's spend, summed already (a kept session's, ``kept.py``), against its run."""
        if run_id is None:
            return
        self.tokens[run_id] += tokens
        self.cost[run_id] += cost_usd

    def exceeded(self, run_id: str | None) -> str | None:
        """Why the run may not call the model again, or None while it is within budget."""
        if run_id is None:
            return None
        if self.token_limit is not None and self.tokens[run_id] >= self.token_limit:
            return f"workflow used {self.tokens[run_id]} tokens of its {self.token_limit} token budget"
        if self.cost_limit is not None and self.cost[run_id] >= self.cost_limit:
            return f"workflow spent ${self.cost[run_id]:.4f} of its ${self.cost_limit:.2f} budget"
        return None
