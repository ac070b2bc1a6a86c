"""Floors that run one way (docs/architecture.md): no module imports from a floor above
its own, and packages on one floor import each other only in their listed order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src" / "ccweave"
FLOORS: list[list[str]] = [
    ["errors", "limits", "units", "infile", "jsonfile", "outfile", "peak_rss", "gc_pause",
     "solvers", "lp", "interrupts", "__init__", "_startup"],
    ["topology", "collectives", "schedule", "plan", "transforms"],
    ["verify", "simulate", "bounds"],
    ["export", "multipath", "synth"],
    ["compare", "select"],
    ["lint", "nccl", "runtime", "testbed", "profile", "bench"],
    ["commands", "cli", "torch", "__main__"],
]
"""Each floor's units (a module, or a package and everything in it), in the order a
unit may import its siblings: a unit imports its own floor's units listed before it."""
FLOOR = {unit: number for number, units in enumerate(FLOORS) for unit in units}
ORDER = {unit: index for units in FLOORS for index, unit in enumerate(units)}
SAME_FLOOR_PAIRS = {("topology", "collectives"), ("topology", "schedule")}
"""Exceptions within a floor, each with its reason: none today beyond the order."""


def unit_of(module: str) -> str:
    """``ccweave.synth.taccl.build`` -> ``synth``; ``ccweave`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports() -> list[tuple[str, str, int]]:
    """Every ``ccweave`` import in the package: (importing module, imported module, line)."""
    found = []
    for path in SOURCE.rglob("*.py"):
        module = ".".join(("ccweave", *path.relative_to(SOURCE).with_suffix("").parts))
        module = module.removesuffix(".__init__")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] == "ccweave":
                targets = [node.module] if node.module != "ccweave" else \
                    [f"ccweave.{alias.name}" if _is_module(alias.name) else "ccweave"
                     for alias in node.names]
                found += [(module, target, node.lineno) for target in targets]
            elif isinstance(node, ast.Import):
                found += [(module, alias.name, node.lineno) for alias in node.names
                          if alias.name.split(".")[0] == "ccweave"]
    return found


def _is_module(name: str) -> bool:
    return (SOURCE / f"{name}.py").exists() or (SOURCE / name).is_dir()


def climbs(importer: str, imported: str) -> bool:
    a, b = unit_of(importer), unit_of(imported)
    if a == b or b == "__init__" or a not in FLOOR or b not in FLOOR:
        return False  # a unit with no floor is test_every_unit_has_a_floor's to name
    if FLOOR[b] != FLOOR[a]:
        return FLOOR[b] > FLOOR[a]
    return ORDER[b] > ORDER[a] and (a, b) not in SAME_FLOOR_PAIRS


def test_every_unit_has_a_floor():
    units = {unit_of(module) for pair in imports() for module in pair[:2]}
    assert not units - set(FLOOR), "give these a floor in docs/architecture.md and here"


def test_no_import_climbs_a_floor():
    bad = [f"{importer} (line {line}) imports {imported}"
           for importer, imported, line in imports() if climbs(importer, imported)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize(("importer", "imported", "up"), [
    ("ccweave.synth.ring", "ccweave.compare", True),
    ("ccweave.select", "ccweave.compare", False),
    ("ccweave.compare", "ccweave.synth.registry", False),
    ("ccweave.runtime.job", "ccweave.testbed.records", True),
    ("ccweave.testbed.launch", "ccweave.runtime.progress", False),
    ("ccweave.topology.model", "ccweave.errors", False)])
def test_the_rule_itself(importer, imported, up):
    assert climbs(importer, imported) is up
