"""ForestColl's throughput-optimal spanning-tree packing (arXiv 2402.06787), registered as
the ``trees`` strategy: out-trees from every root that together reach the allgather cut
bound, chunks pipelined down them; reduce-scatter on the reversed trees; allreduce as the
two; broadcast and reduce from one root. Modules: :mod:`.network` (the capacity network),
:mod:`.rate` (integer capacities at the bound's rate), :mod:`.split` (switch removal),
:mod:`.pack` (the trees), :mod:`.forest` (all three, cached), :mod:`.lower` (the
Schedule), :mod:`.strategy` (the strategy). See docs/trees.md.
"""

from ccweave.synth.forest.forest import Forest, allgather_forest, broadcast_forest
from ccweave.synth.forest.strategy import build_trees

__all__ = ["Forest", "allgather_forest", "broadcast_forest", "build_trees"]
