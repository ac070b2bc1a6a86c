"""``ccweave lint FILE``: the rules under which a runtime silently runs its own algorithm
instead of the file's, checked on the file, the job's calls and its environment.

One line per finding (rule, value, fix); exit 0 when nothing falls back (notes allowed),
1 with findings, 2 for bad input (docs/lint.md).
"""

from __future__ import annotations

import os

from ccweave.commands import _inputs, _output
from ccweave.lint import DTYPE_BYTES, OPS, RULES, Call, Runtime, lint

ORDER = 66


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "lint", help="why a runtime would ignore an MSCCL XML algorithm or MSCCL++ plan")
    parser.add_argument("file", help="an MSCCL XML algorithm (.xml) or an MSCCL++ execution "
                                     "plan (JSON)")
    parser.add_argument("--runtime", choices=[r.value for r in Runtime],
                        help="rccl (default for .xml), msccl (microsoft/msccl), azure (the "
                             "Azure MSCCL executor on NCCL), mscclpp (default for plans)")
    parser.add_argument("--ranks", type=int, metavar="N",
                        help="ranks in the communicator (default: the file's own)")
    parser.add_argument("--sizes", help="the calls' sizes as nccl-tests prints them (the "
                                        "whole buffer), e.g. 1MB,64MB or 1KB:1GB")
    parser.add_argument("--dtype", default="float32", choices=list(DTYPE_BYTES),
                        help="the calls' data type (default float32)")
    parser.add_argument("--op", default="sum", choices=list(OPS),
                        help="the reduction (default sum; PyTorch's ReduceOp.AVG is avg)")
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument("--inplace", "--in-place", dest="inplace", action="store_true",
                      default=None, help="the calls pass one buffer (torch all_reduce does)")
    kind.add_argument("--out-of-place", dest="inplace", action="store_false",
                      help="the calls pass separate buffers (default: check both kinds)")
    parser.add_argument("--ranks-per-process", type=int, default=1, metavar="K",
                        help="GPUs one process drives (nccl-tests -g K; default 1)")
    parser.add_argument("--ignore-env", action="store_true",
                        help="leave out the environment rules (default: check this "
                             "process's environment, as the job would see it)")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    sizes = tuple(_inputs.sizes(args.sizes)) if args.sizes else ()
    call = Call(ranks=args.ranks, sizes=sizes, dtype=args.dtype, op=args.op,
                inplace=args.inplace, ranks_per_process=args.ranks_per_process,
                env=None if args.ignore_env else dict(os.environ))
    report = lint(args.file, Runtime(args.runtime) if args.runtime else None, call)
    runtime = report.runtime  # the default follows the file's text, not only its name
    if args.json:
        _output.print_json({
            "file": args.file, "runtime": runtime.value, "collective": report.collective,
            "ranks": report.ranks, "ok": report.ok,
            "rules": [{"rule": r.id, "source": r.source, "requires": r.requires}
                      for r in RULES[runtime]],
            "findings": [{"rule": f.rule, "note": f.note, "message": f.message, "fix": f.fix}
                         for f in report.findings]})
        return 0 if report.ok else 1
    name = _output.plain(args.file)
    for finding in report.findings:
        _output.console.print(f"{name}: {_output.plain(finding.line())}", soft_wrap=True)
    problems, notes = len(report.problems), len(report.findings) - len(report.problems)
    checked = f"{len(RULES[runtime])} {runtime.value} rules"
    what = f"{_output.plain(report.collective)} on {report.ranks} ranks"
    if problems:
        _output.console.print(f"{name}: {problems} finding(s), {notes} note(s): calls fall "
                              f"back ({what}; {checked})", soft_wrap=True)
        return 1
    _output.console.print(f"{name}: passes {checked} ({what}"
                          + (f"; {notes} note(s) on what lint cannot see" if notes else "")
                          + ")", soft_wrap=True)
    return 0
