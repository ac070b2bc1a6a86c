"""TACCL on open-source solvers: synthesis from a profiled topology and a communication
sketch (arXiv 2111.04867), registered as the ``taccl`` strategy.

Modules are named by TACCL's stage, so the folder lists as the pipeline: the sketch
(:mod:`.sketch` reads a file, :mod:`.sketch_model` and :mod:`.sketch_taccl` its two
spellings, :mod:`.sketch_defaults` those read off a topology, :mod:`.profile` TACCL's link
costs, :mod:`.logical` the sketch applied to a topology, :mod:`.demand` what must move);
routing, stage 1 (:mod:`.routing` the front door, :mod:`.routing_trees`,
:mod:`.routing_milp`, :mod:`.routing_search`, :mod:`.routing_paths`,
:mod:`.routing_result`); ordering, stage 2 (:mod:`.ordering`, :mod:`.ordering_bound`,
:mod:`.ordering_joint`); :mod:`.contiguity`, stage 3; :mod:`.lowering` (the Schedule) and
:mod:`.reduction` (reduce-scatter and allreduce); :mod:`.build` drives them and
:mod:`.solver` is the HiGHS model every MILP uses. See docs/taccl.md.
"""

from ccweave.synth.taccl.build import TacclOptions, build_taccl, synthesize_taccl
from ccweave.synth.taccl.sketch import Sketch, from_dict, load

__all__ = ["Sketch", "TacclOptions", "build_taccl", "from_dict", "load", "synthesize_taccl"]
