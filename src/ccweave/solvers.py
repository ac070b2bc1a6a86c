"""Shared access to the open-source solvers (HiGHS through ``highspy``)."""

from __future__ import annotations


def quiet_highs(threads: int | None = None):
    """A ``highspy.Highs`` that prints nothing, not even its banner, using ``threads``
    threads (``None``: HiGHS' choice).

    highspy prints a banner on the C stdout when callbacks are enabled at construction
    unless output is already off; it would spoil ``--json`` output. HiGHS runs on one
    process-wide thread pool and refuses to run (status "Not Set") when an instance asks
    for another thread count than the pool was started with, so the pool is restarted
    before a count is set.
    """
    import highspy

    class QuietHighs(highspy.Highs):
        def enableCallbacks(self) -> None:
            self.silent()
            super().enableCallbacks()

    if threads is not None:
        highspy.Highs.resetGlobalScheduler(True)
    highs = QuietHighs()
    highs.silent()
    if threads is not None:
        highs.setOptionValue("threads", int(threads))
    return highs
