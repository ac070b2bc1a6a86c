"""Stock NCCL, no fork: NCCL's own tuning model on ccweave's machines, the tuner file NCCL's
example plugin reads, and the graph file ``NCCL_GRAPH_FILE`` loads (docs/nccl.md).

- :mod:`ccweave.nccl.constants`: NCCL's published tuning constants (``src/graph/tuning.cc``,
  ``search.cc``, ``topo.h`` of NCCL 2.30.7).
- :mod:`ccweave.nccl.system`: what NCCL sees of a topology (its link figures, path types)
  and the channels its graph search finds (:mod:`ccweave.nccl.search`).
- :mod:`ccweave.nccl.model`: NCCL's cost model and choice: per collective and size, the
  algorithm, protocol and channels NCCL would run, and its predicted time.
- :mod:`ccweave.nccl.tuner`: those choices as the CSV rules of NCCL's example tuner plugin;
  :mod:`ccweave.nccl.measured` and :mod:`ccweave.nccl.fit` fit the model to measurements.
- :mod:`ccweave.nccl.graph_xml`: ccweave's intra-node ring and tree orders as NCCL's graph XML.
- :mod:`ccweave.nccl.plugin`: load a built example tuner plugin and ask it what it chooses.
- :mod:`ccweave.nccl.inspector`: NCCL Inspector's output read as calls;
  :mod:`ccweave.nccl.explain` sets them beside the bound, the model and ccweave's best.
"""
