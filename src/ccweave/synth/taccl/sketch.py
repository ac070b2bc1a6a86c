"""Reading a communication sketch file, in ccweave's form (docs/sketches.md) or TACCL's
own (``intranode_sketch``, ``hyperparameters``...), read unchanged. What a sketch is
lives in :mod:`ccweave.synth.taccl.sketch_model`; its names are here too, so that a
user of sketches needs one module.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from ccweave.errors import InputError
from ccweave.jsonfile import read_json
from ccweave.synth.taccl import sketch_taccl
from ccweave.synth.taccl.sketch_model import (
    MAX_CHUNKUP,
    Balance,
    Connections,
    Hyperedge,
    InternodeSketch,
    Intranode,
    IntranodeSketch,
    Sketch,
    from_ccweave,
)

__all__ = ["MAX_CHUNKUP", "Balance", "Connections", "Hyperedge", "InternodeSketch",
           "Intranode", "IntranodeSketch", "Sketch", "from_dict", "load"]


def load(path: str | Path) -> Sketch:
    """Read a sketch JSON file; errors name the file and the field."""
    data = read_json(path, "give a sketch file: a ccweave sketch (docs/sketches.md) or TACCL's "
                           "own; examples/sketches/ has some")
    return from_dict(data, str(path))


def from_dict(data: object, source: str = "sketch") -> Sketch:
    """A :class:`Sketch` from its JSON form, naming ``source`` and the field on error;
    TACCL's own sketch files are recognised and read unchanged."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: a sketch is a JSON object: ccweave's (fields name, "
                         "intranode, internode, symmetry_offsets, input_chunkup, nodes) or "
                         "TACCL's (intranode_sketch, internode_sketch, hyperparameters...)")
    if sketch_taccl.is_taccl_sketch(data):
        return sketch_taccl.from_taccl(data, source)
    return from_ccweave(data, source)
