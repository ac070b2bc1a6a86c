"""TACCL on open-source solvers: synthesis from a profiled topology and a communication
sketch (arXiv 2111.04867), registered as the ``taccl`` strategy.

Stages, one module each: :mod:`.sketch` (the file), :mod:`.logical` (the sketch applied
to a topology), :mod:`.demand` (what must move), :mod:`.paths` (candidates),
:mod:`.routing` (stage 1, MILP), :mod:`.ordering` (stage 2, greedy),
:mod:`.contiguity` (stage 3, MILP), :mod:`.lower` (the Schedule), :mod:`.build`
(the pipeline and the strategy). See docs/taccl.md.
"""

from ccweave.synth.taccl.build import TacclOptions, build_taccl, synthesize_taccl
from ccweave.synth.taccl.sketch import Sketch, from_dict, load

__all__ = ["Sketch", "TacclOptions", "build_taccl", "from_dict", "load", "synthesize_taccl"]
