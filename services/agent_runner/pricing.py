"""Model prices, context windows and output limits, as data, and the cost of a reply's token usage.

PRICES ARE DATA, NOT TRUTH: they are Anthropic's public list prices (USD per million tokens) as
published on the platform's pricing page at the time of writing (5-minute cache writes; 1-hour
cache writes cost more and are not used here). Check https://claude.com/pricing and update this
table when they change; an unknown model is priced with :data:`FALLBACK` and logged once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from autarch.contracts.agents import TurnUsage

__all__ = ["FALLBACK", "MODELS", "ModelInfo", "cost_usd", "model_info"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model's list prices (USD per million tokens), context window and output limit."""

    input: float
    output: float
    cache_write: float
    """5-minute cache writes (1.25x input)."""
    cache_read: float
    """Cache hits and refreshes."""
    context_window: int = 200_000
    max_output: int = 64_000
    """The most output tokens one reply may have (the largest ``max_tokens`` the model takes)."""
    adaptive_thinking: bool = False
    """The model takes ``thinking: {"type": "adaptive"}`` (and prefers it to a fixed budget)."""


_OPUS_45 = ModelInfo(input=5.0, output=25.0, cache_write=6.25, cache_read=0.50)
_OPUS_46 = ModelInfo(input=5.0, output=25.0, cache_write=6.25, cache_read=0.50, max_output=128_000,
                     adaptive_thinking=True)
_OPUS_4 = ModelInfo(input=15.0, output=75.0, cache_write=18.75, cache_read=1.50, max_output=32_000)
_SONNET_4 = ModelInfo(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30)
_SONNET_46 = ModelInfo(input=3.0, output=15.0, cache_write=3.75, cache_read=0.30, max_output=128_000,
                       adaptive_thinking=True)
_HAIKU_45 = ModelInfo(input=1.0, output=5.0, cache_write=1.25, cache_read=0.10)


def _gen5(input: float, output: float, *, cache_read: float) -> ModelInfo:
    # The 5.x generation: 1M-token context, adaptive thinking, 5-minute cache writes at 1.25x input.
    return ModelInfo(input=input, output=output, cache_write=input * 1.25, cache_read=cache_read,
                     context_window=1_000_000, max_output=128_000, adaptive_thinking=True)


MODELS: dict[str, ModelInfo] = {
    "claude-fable-5-1": _gen5(10.0, 50.0, cache_read=0.25),
    "claude-mythos-5-1": _gen5(10.0, 50.0, cache_read=0.25),
    "claude-fable-5": _gen5(10.0, 50.0, cache_read=1.0),
    "claude-mythos-5": _gen5(10.0, 50.0, cache_read=1.0),
    "claude-opus-5-5": _gen5(4.0, 20.0, cache_read=0.20),
    "claude-opus-5": _gen5(5.0, 25.0, cache_read=0.50),
    "claude-sonnet-5-5": _gen5(2.0, 10.0, cache_read=0.10),
    "claude-sonnet-5": _gen5(2.0, 10.0, cache_read=0.20),
    "claude-opus-4-8": _OPUS_46,
    "claude-opus-4-7": _OPUS_46,
    "claude-opus-4-6": _OPUS_46,
    "claude-opus-4-5": _OPUS_45,
    "claude-opus-4-1": _OPUS_4,
    "claude-opus-4-0": _OPUS_4,
    "claude-sonnet-4-6": _SONNET_46,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4-0": _SONNET_4,
    "claude-haiku-4-5": _HAIKU_45,
}
"""List prices per model alias; a dated id (``claude-haiku-4-5-20251001``) is priced as its alias."""

FALLBACK = _SONNET_4
"""Prices assumed for a model not in the table (a proxy's own name, the scripted model's)."""

_warned: set[str] = set()


def model_info(model: str) -> ModelInfo:
    """The table entry of ``model`` (or of its alias without a date suffix), else :data:`FALLBACK`."""
    info = MODELS.get(model)
    if info is None:
        head, _, tail = model.rpartition("-")
        info = MODELS.get(head) if tail.isdigit() and len(tail) == 8 else None
    if info is None:
        if model not in _warned:
            _warned.add(model)
            log.warning("no price for model %r; using the fallback prices", model)
        return FALLBACK
    return info


def cost_usd(model: str, usage: TurnUsage) -> float:
    """What ``usage`` costs on ``model`` at list prices (``input_tokens`` excludes cached tokens, as reported)."""
    info = model_info(model)
    return (
        usage.input_tokens * info.input
        + usage.output_tokens * info.output
        + usage.cache_creation_input_tokens * info.cache_write
        + usage.cache_read_input_tokens * info.cache_read
    ) / 1_000_000
