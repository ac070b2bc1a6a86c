"""TACCL's own communication-sketch files, read unchanged.

A TACCL user arrives with files like ``sk1-dgx2-n2.json`` from TACCL's public code
(``nnodes``, ``intranode_sketch``, ``internode_sketch``, ``symmetry_offsets``,
``hyperparameters``). They are recognised by those fields and translated into the same
:class:`~ccweave.synth.taccl.sketch.Sketch` that ccweave's own format gives:

=====================================================  ==================================
TACCL                                                  ccweave
=====================================================  ==================================
``nnodes``                                             ``nodes`` (checked on the machine)
``intranode_sketch.strategy`` ``none`` / ``switch``    ``intranode.strategy`` ``none`` /
                                                       ``switch``
``intranode_sketch.strategy`` ``minmax`` / ``maxmin``  ``intranode.strategy`` ``none`` and
                                                       ``intranode.balance``
``intranode_sketch.switches``                          ``intranode.switches`` (repeated
                                                       groups, TACCL's NVSwitch planes,
                                                       are one switch: the machine
                                                       already has its bandwidth)
``intranode_sketch.switch_hyperedge_strategy``         ``intranode.hyperedge``
``internode_sketch.internode_conn``                    ``internode.connections``
``internode_sketch.gpus_to_sender_rev_map``            ``internode.carries``
``internode_sketch.enforce_ordering``                  ``internode.enforce_ordering``
``hyperparameters.input_chunkup``                      ``input_chunkup``
=====================================================  ==================================
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ccweave.errors import InputError
from ccweave.synth.taccl import sketch_model as sk
from ccweave.units import shown

MARKERS = frozenset({"nnodes", "intranode_sketch", "internode_sketch", "hyperparameters"})
"""Fields only TACCL's format has: one of them makes a file a TACCL sketch."""
_TOP = {"nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets",
        "hyperparameters", "comment"}
_INTRA = {"strategy", "switches", "switch_hyperedge_strategy"}
_INTER = {"strategy", "internode_conn", "gpus_to_sender_rev_map", "enforce_ordering"}
_HYPER = {"input_chunkup"}
_INTRA_STRATEGIES = {"none": sk.Intranode.NONE, "switch": sk.Intranode.SWITCH}
_BALANCE = {"minmax": sk.Balance.MINMAX, "maxmin": sk.Balance.MAXMIN}
"""TACCL's load-balancing intranode strategies: its links as ``none``, and an objective."""


def is_taccl_sketch(data: Mapping) -> bool:
    """Whether ``data`` is in TACCL's sketch format rather than ccweave's."""
    return bool(MARKERS & set(data))


def from_taccl(data: Mapping, source: str) -> sk.Sketch:
    """The :class:`~ccweave.synth.taccl.sketch.Sketch` of a TACCL sketch file; errors name
    the file and TACCL's field."""
    sk.no_unknown(data, _TOP, source, "")
    nodes = sk.node_count(data.get("nnodes", 1), source, "nnodes")
    intranode = _intranode(data.get("intranode_sketch"), source)
    inter_data = data.get("internode_sketch")
    if inter_data is None:
        if nodes and nodes > 1:
            raise InputError(f"{source}: nnodes is {nodes} but there is no internode_sketch; "
                             'add one, e.g. {"strategy": "relay", "internode_conn": '
                             '"direct-map"}')
        internode = sk.InternodeSketch()
    else:
        internode = _internode(inter_data, source)
    hyper = data.get("hyperparameters", {})
    if not isinstance(hyper, Mapping):
        raise InputError(f"{source}: hyperparameters must be an object like "
                         '{"input_chunkup": 2}')
    sk.no_unknown(hyper, _HYPER, source, "hyperparameters.")
    return sk.Sketch(
        intranode=intranode, internode=internode,
        symmetry_offsets=sk.symmetry_offsets(data.get("symmetry_offsets", []), source),
        input_chunkup=sk.chunkup(hyper.get("input_chunkup", 1), source,
                                 "hyperparameters.input_chunkup"),
        nodes=nodes, name=Path(source).stem if source != "sketch" else "taccl-sketch",
        description="TACCL sketch file", source=source, taccl_keys=True)


def _intranode(data: object, source: str) -> sk.IntranodeSketch:
    if data is None:
        raise InputError(f"{source}: intranode_sketch is missing; a TACCL sketch has one, "
                         'e.g. {"strategy": "none"}')
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: intranode_sketch must be an object like "
                         '{"strategy": "none"}')
    sk.no_unknown(data, _INTRA, source, "intranode_sketch.")
    name = data.get("strategy", "none")
    if not isinstance(name, str) or (name not in _INTRA_STRATEGIES and name not in _BALANCE):
        # (a list here was a TypeError (unhashable) traceback)
        raise InputError(f"{source}: intranode_sketch.strategy is {shown(name)}; TACCL's are "
                         "'none', 'switch', 'minmax' and 'maxmin'")
    strategy = _INTRA_STRATEGIES.get(name, sk.Intranode.NONE)
    if strategy is not sk.Intranode.SWITCH:
        for field in ("switches", "switch_hyperedge_strategy"):
            if field in data:
                raise InputError(f"{source}: intranode_sketch.{field} goes with strategy "
                                 "'switch'")
        return sk.IntranodeSketch(strategy, balance=_BALANCE.get(name))
    raw = sk.as_list(data.get("switches", []), source, "intranode_sketch.switches")
    groups: list[tuple[int, ...]] = []
    for i, group in enumerate(raw):
        ranks = sk.local_ranks(group, source, f"intranode_sketch.switches[{i}]", min_size=2)
        same = [g for g in groups if set(g) == set(ranks)]
        if same:
            continue  # one more plane of the same switch
        overlap = [g for g in groups if set(g) & set(ranks)]
        if overlap:
            raise InputError(f"{source}: intranode_sketch.switches[{i}] shares ranks with an "
                             "earlier switch without being the same group; switches are "
                             "disjoint or repeat a group (planes of one switch)")
        groups.append(ranks)
    policies = sk.as_list(data.get("switch_hyperedge_strategy", []), source,
                          "intranode_sketch.switch_hyperedge_strategy")
    hyperedge = None
    if policies:
        chosen = {sk.choice(p, sk.Hyperedge, source,
                            f"intranode_sketch.switch_hyperedge_strategy[{i}]")
                  for i, p in enumerate(policies)}
        if len(chosen) > 1:
            raise InputError(f"{source}: intranode_sketch.switch_hyperedge_strategy mixes "
                             "policies; ccweave applies one to every switch (as TACCL's "
                             "solver uses the first)")
        hyperedge = chosen.pop()
    return sk.IntranodeSketch(sk.Intranode.SWITCH, hyperedge, tuple(groups))  # type: ignore


def _internode(data: object, source: str) -> sk.InternodeSketch:
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: internode_sketch must be an object like "
                         '{"strategy": "relay", "internode_conn": "direct-map"}')
    sk.no_unknown(data, _INTER, source, "internode_sketch.")
    if data.get("strategy", "relay") != "relay":
        raise InputError(f"{source}: internode_sketch.strategy is {data.get('strategy')!r}; "
                         "TACCL's only internode strategy is 'relay'")
    raw = data.get("internode_conn")
    if raw is None:
        raise InputError(f"{source}: internode_sketch.internode_conn is missing; give "
                         "'direct-map', 'fully-connected' or a map like {\"0\": [1]}")
    connections: tuple[tuple[int, tuple[int, ...]], ...] | sk.Connections
    if isinstance(raw, str):
        connections = sk.choice(raw, sk.Connections, source,  # type: ignore[assignment]
                                "internode_sketch.internode_conn")
    else:
        connections = sk.rank_map(raw, source, "internode_sketch.internode_conn")
        if not connections:
            raise InputError(f"{source}: internode_sketch.internode_conn is an empty map")
    carries = sk.rank_map(data.get("gpus_to_sender_rev_map", {}), source,
                          "internode_sketch.gpus_to_sender_rev_map")
    enforce = data.get("enforce_ordering", False)
    if not isinstance(enforce, bool):
        raise InputError(f"{source}: internode_sketch.enforce_ordering must be true or false")
    if enforce and not carries:
        raise InputError(f"{source}: internode_sketch.enforce_ordering needs "
                         "gpus_to_sender_rev_map (whose chunks each sender carries)")
    return sk.InternodeSketch(connections, carries=carries, enforce_ordering=enforce)
