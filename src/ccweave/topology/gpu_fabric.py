"""The GPUs' own fabric (NVLink mesh or NVSwitch) for a file that does not say it.

A bare PCI tree (an ``NCCL_TOPO_FILE`` as cloud VMs ship it, hwloc's XML) lists GPUs by
PCI class code only: NCCL fills in NVLink at run time from NVML. ccweave never invents
that fabric; the user names it (``--gpu-fabric``):

- a machine family, with its published figures: ``h100-nvswitch``, ``a100-nvswitch``,
  ``v100-hybrid-mesh``, or ``pcie-only`` (no NVLink at all);
- or a second source from the same machine: an NCCL topology dump
  (``NCCL_TOPO_DUMP_FILE``: its ``<gpu>`` elements' ``<nvlink>`` children), the text of
  ``nvidia-smi topo -m`` (``NV#`` cells; needs ``--gpu`` for the per-link figure), or the
  text of ``nvidia-smi nvlink -s`` (each GPU's active links and their speed; it does not
  say where a link leads, so it refines a family: ``--gpu-fabric h100-nvswitch
  --gpu-fabric nvlink-s.txt``).

GPU ``i`` is the ``i``-th GPU in ascending PCI bus id, which is how CUDA numbers devices
under ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and how ``nvidia-smi`` numbers them (CUDA
Programming Guide, CUDA Environment Variables); run jobs with that setting so rank ``r``
(local rank -> device ``r``) is GPU ``r``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ccweave.errors import InputError
from ccweave.topology import link_table, zoo
from ccweave.topology.model import Link, NodeKind
from ccweave.units import GB_PER_S, US


@dataclass(frozen=True)
class Family:
    """A machine family's GPU fabric, with the published figures it rests on."""

    name: str
    generation: str | None
    """Key of :data:`link_table.GPU_GENERATIONS` (per-link figure, PCIe, usual NIC)."""
    shape: str
    """``nvswitch`` (every GPU into one switch), ``mesh`` (``pairs``) or ``none``."""
    nvlinks: int = 0
    """NVLinks per GPU into the NVSwitch (``nvswitch``)."""
    pairs: tuple[tuple[int, ...], ...] = ()
    """NVLinks between GPU pairs (``mesh``), GPU ``i`` in PCI bus id order."""
    citation: str = ""


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("h100-nvswitch", "h100", "nvswitch", nvlinks=18, citation=(
        "HGX/DGX H100: 18 NVLink4 per GPU, 900 GB/s bidirectional, into four NVSwitch "
        "chips (NVIDIA H100 datasheet; NVIDIA technical blog 'Introducing NVIDIA HGX "
        "H100', 2022), merged into one switch as NCCL does; as the zoo's dgx-h100")),
    Family("a100-nvswitch", "a100", "nvswitch", nvlinks=12, citation=(
        "HGX/DGX A100: 12 NVLink3 per GPU, 600 GB/s bidirectional, into six NVSwitches "
        "(NVIDIA DGX A100 User Guide, hardware overview), merged into one switch as NCCL "
        "does; as the zoo's dgx-a100")),
    Family("v100-hybrid-mesh", "v100", "mesh", pairs=zoo.DGX1_NVLINKS, citation=(
        "DGX-1 / Azure NDv2: 8 V100, 6 NVLink2 each in a hybrid cube-mesh (NVIDIA DGX-1 "
        "With Tesla V100 System Architecture, white paper WP-08437-002, 2017); as the "
        "zoo's dgx1")),
    Family("pcie-only", None, "none", citation="no NVLink: GPUs reach each other over "
           "PCIe only (the user said so: --gpu-fabric pcie-only)"),
)}


@dataclass(frozen=True)
class GpuFabric:
    """The GPUs' NVLinks, GPU ``i`` in PCI bus id order; GB/s per direction."""

    description: str
    """Where the figures come from, for ``topo show``."""
    switch: Mapping[int, float] = field(default_factory=dict)
    """GPU -> GB/s of its links into the one NVSwitch node ``nvswitch``."""
    pairs: Mapping[tuple[int, int], float] = field(default_factory=dict)
    """(GPU a, GPU b) -> GB/s of the NVLinks from a to b."""
    cpu: Mapping[int, float] = field(default_factory=dict)
    """GPU -> GB/s of NVLinks to its own CPU (POWER9 in an NCCL dump)."""
    generation: link_table.GpuGeneration | None = None
    """The GPU generation where the source says it (for the usual NIC, the PCIe gen)."""

    def links(self, ranks: Sequence[object], cpus: Sequence[str]) -> tuple[
            list[Link], dict[str, NodeKind]]:
        """Links and fabric nodes with GPU ``i`` as ``ranks[i]`` on CPU ``cpus[i]``."""
        alpha = link_table.NVLINK_ALPHA_US
        links: list[Link] = []
        fabric: dict[str, NodeKind] = {}
        if self.switch:
            fabric["nvswitch"] = NodeKind.SWITCH
        for gpu, gbps in self.switch.items():
            links += link_table.duplex(ranks[gpu], "nvswitch", gbps, alpha, "nvlink")
        for (a, b), gbps in self.pairs.items():
            links.append(Link(ranks[a], ranks[b], gbps * GB_PER_S, alpha * US, "nvlink"))
        for gpu, gbps in self.cpu.items():
            links += link_table.duplex(ranks[gpu], cpus[gpu], gbps, alpha, "nvlink")
        return links, fabric


def names() -> list[str]:
    """What ``--gpu-fabric`` takes besides a file."""
    return list(FAMILIES)


OPTIONS_HELP = (f"--gpu-fabric {'|'.join(FAMILIES)}, or a second source from the same "
                "machine: --gpu-fabric DUMP.xml (NCCL_TOPO_DUMP_FILE), --gpu-fabric "
                "TOPO.txt --gpu h100 (nvidia-smi topo -m), or a family plus --gpu-fabric "
                "NVLINK.txt (nvidia-smi nvlink -s)")


def resolve(specs: Sequence[str], busids: Sequence[str], *, gpu: str | None = None,
            source: str = "the file") -> GpuFabric:
    """The fabric ``--gpu-fabric`` asks for (a family name and/or a file; at most one
    of each), for GPUs with PCI ``busids`` in bus id order.

    Raises ``InputError`` naming the flag when no source is given, two conflict, or a
    file does not fit the machine.
    """
    count = len(busids)
    if not specs:
        raise InputError(f"{source}: {count} GPUs known by PCI class code only; the file "
                         "does not say how they are joined (NVLink, NVSwitch), and ccweave "
                         f"will not guess: give {OPTIONS_HELP}")
    families = [s for s in specs if s in FAMILIES]
    files = [s for s in specs if s not in FAMILIES]
    if len(families) > 1 or len(files) > 1:
        raise InputError(f"--gpu-fabric given {len(specs)} times ({', '.join(specs)}): give "
                         "one family and/or one file")
    family = FAMILIES[families[0]] if families else None
    if not files:
        assert family is not None
        return _family_fabric(family, count)
    path = Path(files[0])
    text = _read(path)
    kind = _file_kind(text, path)
    if kind == "nvlink-s":
        if family is None:
            raise InputError(f"--gpu-fabric {path}: `nvidia-smi nvlink -s` says how many "
                             "NVLinks each GPU has and how fast, not where they lead; give "
                             f"the shape too: --gpu-fabric {'|'.join(FAMILIES)} beside it, or "
                             "give `nvidia-smi topo -m` instead")
        return _refine_with_status(family, _nvlink_status(text, path), count, path)
    if family is not None:
        raise InputError(f"--gpu-fabric {family.name} and --gpu-fabric {path}: both say how "
                         "the GPUs are joined; give one")
    if kind == "nccl-dump":
        return _from_dump(text, path, busids)
    return _from_topo_matrix(text, path, count, gpu)


# --- families ---------------------------------------------------------------------------

def _family_fabric(family: Family, count: int) -> GpuFabric:
    gen = link_table.GPU_GENERATIONS[family.generation] if family.generation else None
    described = f"--gpu-fabric {family.name}: {family.citation}"
    if family.shape == "none":
        return GpuFabric(described)
    assert gen is not None
    per_link = link_table.nvlink_gbps(gen.sm)
    if family.shape == "nvswitch":
        return GpuFabric(f"{described}; {family.nvlinks} x {per_link:g} GB/s per GPU",
                         switch={g: family.nvlinks * per_link for g in range(count)},
                         generation=gen)
    if count != len(family.pairs):
        raise InputError(f"--gpu-fabric {family.name}: that mesh joins {len(family.pairs)} "
                         f"GPUs, the file has {count}; give a second source (an NCCL dump "
                         "or nvidia-smi topo -m) for this machine")
    pairs = {(a, b): c * per_link for a, row in enumerate(family.pairs)
             for b, c in enumerate(row) if c}
    return GpuFabric(f"{described}; {per_link:g} GB/s per NVLink", pairs=pairs, generation=gen)


# --- second sources ---------------------------------------------------------------------

def _read(path: Path) -> str:
    from ccweave.infile import read_text

    return read_text(path, f"not a family ({', '.join(FAMILIES)}); give an NCCL dump (XML), "
                     "or the text of nvidia-smi topo -m or nvidia-smi nvlink -s",
                     flag="--gpu-fabric")


def _file_kind(text: str, path: Path) -> str:
    head = text.lstrip()
    if head.startswith("<"):
        return "nccl-dump"
    if re.search(r"^\s*GPU0\s", text, re.MULTILINE):
        return "topo-m"
    if re.search(r"^\s*GPU \d+:", text, re.MULTILINE):
        return "nvlink-s"
    raise InputError(f"--gpu-fabric {path}: not an NCCL dump (XML), nvidia-smi topo -m (a "
                     "GPU0 header) or nvidia-smi nvlink -s (GPU 0: ... Link 0: ...); give one "
                     f"of those or a family ({', '.join(FAMILIES)})")


def _from_dump(text: str, path: Path, busids: Sequence[str]) -> GpuFabric:
    from ccweave.topology import nccl_xml

    gpus = nccl_xml.gpu_nvlinks(text, str(path))
    if not gpus:
        raise InputError(f"--gpu-fabric {path}: the dump has no <gpu> element; dump it from "
                         "a job that used the GPUs (NCCL_TOPO_DUMP_FILE)")
    index = {busid: number for number, busid in enumerate(busids)}
    missing = [b for b in busids if b not in gpus]
    if missing:
        raise InputError(f"--gpu-fabric {path}: GPU {missing[0]} of the PCI tree is not in "
                         f"the dump (its GPUs: {', '.join(sorted(gpus)[:8])}); give a dump "
                         "from the same machine")
    switch: dict[int, float] = {}
    pairs: dict[tuple[int, int], float] = {}
    cpu: dict[int, float] = {}
    sms = set()
    for busid, number in index.items():
        sm, nvlinks = gpus[busid]
        sms.add(sm)
        per_link = link_table.nvlink_gbps(sm)
        for target, count, tclass in nvlinks:
            gbps = count * per_link
            if tclass.startswith("0x03"):
                if target in index:
                    pairs[number, index[target]] = pairs.get((number, index[target]), 0) + gbps
            elif tclass.startswith("0x068001"):
                cpu[number] = cpu.get(number, 0) + gbps
            else:
                switch[number] = switch.get(number, 0) + gbps
    for (a, b), gbps in list(pairs.items()):
        pairs.setdefault((b, a), gbps)  # listed on one side only
    gen = next((g for g in link_table.GPU_GENERATIONS.values() if g.sm in sms), None)
    described = (f"--gpu-fabric {path}: the NCCL dump's <nvlink> elements, matched by PCI "
                 f"bus id; {', '.join(f'{link_table.nvlink_gbps(s):g}' for s in sorted(sms))} "
                 "GB/s per NVLink by the GPUs' sm (ccweave's link table)")
    return GpuFabric(described, switch, pairs, cpu, gen)


def _from_topo_matrix(text: str, path: Path, count: int, gpu: str | None) -> GpuFabric:
    from ccweave.topology import nvidia_smi

    if not gpu:
        raise InputError(f"--gpu-fabric {path}: nvidia-smi topo -m does not say the GPU "
                         f"generation; give --gpu ({', '.join(link_table.GPU_GENERATIONS)})")
    gen = link_table.generation(gpu)
    counts = nvidia_smi.nvlink_counts(text, str(path))
    if len(counts) != count:
        raise InputError(f"--gpu-fabric {path}: the matrix has {len(counts)} GPUs, the PCI "
                         f"tree {count}; give the matrix of the same machine")
    switch, pairs, note = nvlinks_from_counts(counts, gen)
    return GpuFabric(f"--gpu-fabric {path}: nvidia-smi topo -m NV# cells, GPU i in PCI bus "
                     f"id order (nvidia-smi's), {link_table.nvlink_gbps(gen.sm):g} GB/s per "
                     f"NVLink ({gen.name}, --gpu){'; ' + note if note else ''}",
                     switch, pairs, generation=gen)


def nvlinks_from_counts(counts: Sequence[Sequence[int]], gen: link_table.GpuGeneration
                        ) -> tuple[dict[int, float], dict[tuple[int, int], float], str]:
    """NVLink counts between GPU pairs as links: an NVSwitch (GPU -> GB/s into it) when a
    GPU shows more NVLinks than its generation has (``NV12`` to all 7 peers of an A100),
    else direct pairs. Returns (switch, pairs, note)."""
    per_link = link_table.nvlink_gbps(gen.sm)
    if any(sum(row) > gen.max_nvlinks for row in counts):
        switch = {a: max(row) * per_link for a, row in enumerate(counts) if max(row)}
        return switch, {}, (f"a GPU shows more NVLinks than the {gen.max_nvlinks} of a "
                            f"{gen.name}: read as an NVSwitch")
    pairs = {(a, b): c * per_link for a, row in enumerate(counts) for b, c in enumerate(row)
             if c}
    return {}, pairs, ""


_STATUS_GPU = re.compile(r"^\s*GPU (\d+):")
_STATUS_LINK = re.compile(r"^\s*Link (\d+):\s*(.*?)\s*$")


def _nvlink_status(text: str, path: Path) -> list[list[float]]:
    """Per GPU, the GB/s of each active link in ``nvidia-smi nvlink -s`` text."""
    gpus: list[list[float]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if match := _STATUS_GPU.match(line):
            if int(match.group(1)) != len(gpus):
                raise InputError(f"--gpu-fabric {path}: line {number}: GPU "
                                 f"{match.group(1)} out of order (expected GPU {len(gpus)})")
            gpus.append([])
        elif match := _STATUS_LINK.match(line):
            if not gpus:
                raise InputError(f"--gpu-fabric {path}: line {number}: a Link line before "
                                 "any GPU line")
            value = match.group(2)
            speed = re.fullmatch(r"([0-9.]+)\s*GB/s", value)
            if speed:
                gpus[-1].append(float(speed.group(1)))
            elif "inactive" not in value.lower():
                raise InputError(f"--gpu-fabric {path}: line {number}: link state {value!r}; "
                                 "expected 'N GB/s' or '<inactive>'")
    return gpus


def _refine_with_status(family: Family, status: list[list[float]], count: int,
                        path: Path) -> GpuFabric:
    if len(status) != count:
        raise InputError(f"--gpu-fabric {path}: lists {len(status)} GPUs, the PCI tree "
                         f"{count}; give the output of the same machine")
    described = (f"--gpu-fabric {family.name} for the shape ({family.citation}); link "
                 f"counts and speeds from nvidia-smi nvlink -s {path}, as reported")
    gen = link_table.GPU_GENERATIONS[family.generation] if family.generation else None
    if family.shape == "none":
        if any(status):
            raise InputError(f"--gpu-fabric pcie-only and {path}: nvlink -s lists active "
                             "NVLinks; name the family they belong to")
        return GpuFabric(described)
    if family.shape == "nvswitch":
        return GpuFabric(described, switch={g: sum(s) for g, s in enumerate(status) if s},
                         generation=gen)
    pairs = {}
    for a, row in enumerate(family.pairs):
        if len(status[a]) != sum(row):
            raise InputError(f"--gpu-fabric {path}: GPU {a} has {len(status[a])} active "
                             f"NVLinks, {family.name} has {sum(row)}; nvlink -s does not say "
                             "which pair lost a link: give nvidia-smi topo -m instead")
        per_link = sum(status[a]) / len(status[a])
        pairs.update({(a, b): c * per_link for b, c in enumerate(row) if c})
    return GpuFabric(described, pairs=pairs, generation=gen)
