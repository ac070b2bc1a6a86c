"""Where an imported machine's figures came from, per link kind, and what the import
corrected: ``ccweave topo show`` prints both, so a figure is never a silent guess.

``links`` maps a link ``kind`` (``nvlink``, ``pcie``, ``net``...) to its source, e.g.
``nvlink: --gpu-fabric h100-nvswitch (NVIDIA DGX H100: 18 NVLink4 per GPU)``;
``warnings`` holds one line per corrected figure (a virtual PCI bridge modelled at its
devices' speed, a link width the file did not report).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ccweave.errors import TopologyError


@dataclass(frozen=True)
class Provenance:
    """Per link kind, where its figures come from; and the import's corrections."""

    links: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "links", dict(self.links))
        object.__setattr__(self, "warnings", tuple(self.warnings))

    @property
    def is_empty(self) -> bool:
        return not self.links and not self.warnings

    def source_of(self, kind: str) -> str:
        """The source of links of ``kind`` (a merged kind ``pcie+nvlink`` names each part);
        empty when unknown."""
        parts = [self.links[part] for part in kind.split("+") if part in self.links]
        return "; ".join(dict.fromkeys(parts))

    def to_dict(self) -> dict[str, object]:
        """The file format: ``{"links": {kind: source}, "warnings": [...]}``."""
        return {"links": dict(self.links), "warnings": list(self.warnings)}


def from_dict(data: object, source: str) -> Provenance:
    """A Provenance from the topology file's ``provenance`` field; ``source`` names the file."""
    if not isinstance(data, dict) or set(data) - {"links", "warnings"}:
        raise TopologyError(f"{source}: field 'provenance' must be an object with 'links' "
                            "(link kind -> source text) and 'warnings' (a list of lines)")
    links = data.get("links", {})
    warnings = data.get("warnings", [])
    if not isinstance(links, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in links.items()):
        raise TopologyError(f"{source}: provenance.links must map link kinds to text, e.g. "
                            '{"nvlink": "--gpu-fabric h100-nvswitch"}')
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise TopologyError(f"{source}: provenance.warnings must be a list of text lines")
    return Provenance(links, tuple(warnings))
