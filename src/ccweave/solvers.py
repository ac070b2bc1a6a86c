"""Shared access to the open-source solvers (HiGHS through ``highspy``)."""

from __future__ import annotations


def quiet_highs():
    """A ``highspy.Highs`` that prints nothing, not even its banner.

    highspy prints a banner on the C stdout when callbacks are enabled at construction
    unless output is already off; it would spoil ``--json`` output.
    """
    import highspy

    class QuietHighs(highspy.Highs):
        def enableCallbacks(self) -> None:
            self.silent()
            super().enableCallbacks()

    highs = QuietHighs()
    highs.silent()
    return highs
