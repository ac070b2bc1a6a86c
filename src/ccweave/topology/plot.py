"""Draw a topology to a PNG: ranks as circles, fabric as squares, link width by bandwidth."""

from __future__ import annotations

from pathlib import Path

from ccweave import outfile
from ccweave.topology.model import NodeKind, Topology

_COLORS = {NodeKind.RANK: "#4c72b0", NodeKind.SWITCH: "#dd8452", NodeKind.NIC: "#55a868",
           NodeKind.CPU: "#c44e52", NodeKind.PCIE: "#8172b3"}


def plot(topology: Topology, path: str | Path) -> Path:
    """Write a PNG drawing of ``topology`` to ``path`` and return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import networkx as nx

    graph = topology.to_networkx().to_undirected()
    layout = _layout(topology, graph)
    size = min(24.0, 6.0 + len(graph) / 12)
    figure, axes = plt.subplots(figsize=(size, size * 0.75))
    widest = max(topology.bandwidths.max(), 1.0)
    widths = [0.5 + 4.0 * data["bandwidth"] / widest for _, _, data in graph.edges(data=True)]
    nx.draw_networkx_edges(graph, layout, ax=axes, width=widths, alpha=0.5)
    for kind, color in _COLORS.items():
        nodes = [n for n in graph if topology.kind(n) is kind]
        if nodes:
            nx.draw_networkx_nodes(graph, layout, nodelist=nodes, node_color=color, ax=axes,
                                   node_shape="o" if kind is NodeKind.RANK else "s",
                                   node_size=300 if len(graph) < 80 else 60, label=kind.value)
    if len(graph) <= 80:
        labels = {node: str(node).replace("$", r"\$") for node in graph}  # no mathtext
        nx.draw_networkx_labels(graph, layout, labels=labels, ax=axes, font_size=7)
    axes.set_title(f"{topology.name}: {topology.num_ranks} ranks, {len(topology.links)} links "
                   "(width ~ bandwidth)", parse_math=False)
    axes.legend(loc="upper right", fontsize=8)
    axes.axis("off")
    path = Path(path)
    try:
        outfile.write_with(path, lambda temp: figure.savefig(temp, dpi=100, format="png",
                                                             bbox_inches="tight"))
    finally:
        plt.close(figure)
    return path


def _layout(topology: Topology, graph):
    import networkx as nx

    if len(graph) <= 200:
        return nx.kamada_kawai_layout(graph)
    return nx.spring_layout(graph, seed=0)
