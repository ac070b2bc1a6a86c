"""Synthesis strategies; :func:`synthesize` is the front door."""

from ccweave.synth.registry import (
    Strategy,
    get_strategy,
    register,
    strategies,
    strategies_for,
    synthesize,
)

__all__ = ["Strategy", "get_strategy", "register", "strategies", "strategies_for", "synthesize"]
