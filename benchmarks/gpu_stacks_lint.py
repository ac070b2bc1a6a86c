"""Section ``lint`` of benchmarks/gpu_stacks.py (issue 41): why a runtime ignores an
algorithm.

1. Each rule of each runtime (RCCL, microsoft/msccl, the Azure executor, MSCCL++'s NCCL
   shim) on its crafted input (``ccweave.lint.cases``: a correct upstream algorithm and
   call, and one edit of the file, the call or the environment): caught, and caught alone.
2. The correct files: every MSCCL XML of ``../shared/fixtures/msccl`` (with the header
   RCCL and Azure require) and every MSCCL++ test plan, linted with a call it serves: passes,
   or what is caught.

    nice python benchmarks/gpu_stacks.py --section lint [--json FILE]
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from ccweave.errors import InputError
from ccweave.lint import RULES, Runtime, lint
from ccweave.lint.cases import correct, crafted

SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


def load() -> float:
    return os.getloadavg()[0]


def lint_section(report: dict) -> None:
    """Section ``lint`` of benchmarks/gpu_stacks.py."""
    if not (SHARED / "msccl").is_dir() or not (SHARED / "mscclpp").is_dir():
        print(f"lint: skipped: {SHARED} has no msccl/ or mscclpp/ fixtures")
        report["lint"] = {"skipped": str(SHARED)}
        return
    started = time.perf_counter()
    print(f"lint: each rule on the input crafted to break it (load {load():.2f})")
    figures: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as work:
        for runtime in Runtime:
            figures[runtime.value] = {"rules": _rules(runtime, Path(work) / runtime.value),
                                      "correct": _correct(runtime, Path(work) / "ok")}
    for runtime, data in figures.items():
        rules = data["rules"]
        caught = sum(r["caught"] for r in rules)
        alone = sum(r["alone"] for r in rules)
        files = data["correct"]
        passed = sum(f["verdict"] == "passes" for f in files)
        others = ", ".join(f"{f['file']}: {f['verdict'].split(':')[0]}" for f in files
                           if f["verdict"] != "passes")
        print(f"lint: {runtime}: {caught}/{len(rules)} rules caught on their crafted input "
              f"({alone} alone); correct files: {passed}/{len(files)} pass"
              + (f" ({others})" if others else ""))
    report["lint"] = figures
    print(f"lint: {time.perf_counter() - started:.1f} s (load {load():.2f})")


def _rules(runtime: Runtime, work: Path) -> list[dict[str, object]]:
    rows = []
    sources = {rule.id: rule.source for rule in RULES[runtime]}
    for case in crafted(runtime, SHARED, work):
        report = lint(case.path, runtime, case.call)
        found = sorted({f.rule for f in report.problems})
        caught = case.rule in found
        rows.append({"rule": case.rule, "edit": case.edit, "caught": caught,
                     "alone": found == [case.rule], "found": found,
                     "source": sources[case.rule]})
        print(f"  {runtime.value:8} {case.rule:11} caught: {'yes' if caught else 'NO '}"
              f"{'' if found == [case.rule] else ' (also ' + ', '.join(found) + ')'}"
              f"  on {case.edit}  [{sources[case.rule]}]")
    return rows


def _correct(runtime: Runtime, work: Path) -> list[dict[str, object]]:
    rows = []
    for path, call in correct(runtime, SHARED, work / runtime.value):
        name = path.name.removeprefix(f"{runtime.value}-")
        try:
            report = lint(path, runtime, call)
        except InputError as error:
            verdict = f"refused as bad input: {str(error).split(': ', 1)[-1][:90]}"
        else:
            verdict = ("passes" if not report.findings else
                       "caught: " + "; ".join(f.line()[:110] for f in report.findings))
        rows.append({"file": name, "verdict": verdict})
        print(f"  {runtime.value:8} correct {name:34} {verdict}")
    return rows
