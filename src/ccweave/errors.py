"""The few exception types ccweave raises; the CLI turns each into one line and exit code 2.

Every message names the input (file, field, argument) and says how to fix it.
"""

from __future__ import annotations


class CCWeaveError(Exception):
    """Base of every error ccweave raises on purpose."""


class InputError(CCWeaveError, ValueError):
    """A file, argument or option is malformed or names something unknown."""


class TopologyError(InputError):
    """A topology is malformed or cannot carry what was asked (e.g. disconnected ranks)."""


class NotApplicableError(CCWeaveError):
    """A strategy cannot build this collective on this topology (e.g. needs 2^k ranks)."""


class VerificationError(CCWeaveError):
    """A schedule does not implement its collective; the message names slot and transfer."""


class SolverError(CCWeaveError):
    """A solver failed, timed out without a solution, or found the model infeasible."""


class RuntimeFault(CCWeaveError):
    """Executing a schedule failed: a peer died, world size mismatch, a timeout."""
