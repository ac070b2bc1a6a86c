"""``ccweave simulate sched.json TOPO --sizes 1MB,1GB``."""

from __future__ import annotations

from ccweave.commands import _inputs, _output
from ccweave.errors import InputError, VerificationError
from ccweave.simulate import simulate
from ccweave.units import GB_PER_S, format_size
from ccweave.verify import check

ORDER = 40


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("simulate", help="predict a schedule's time on a topology")
    parser.add_argument("schedule", help="schedule JSON (or MSCCL XML)")
    parser.add_argument("topology", help=_inputs.TOPO_HELP)
    parser.add_argument("--sizes", default="1MB,1GB", help="e.g. 1MB,1GB or 1KB:1GB")
    parser.add_argument("--links", type=int, default=0, metavar="K",
                        help="also show the K busiest links at the largest size")
    parser.add_argument("--unverified", action="store_true",
                        help="time a schedule the verifier does not prove (marked UNPROVEN)")
    _output.add_json_flag(parser)
    parser.set_defaults(run=run)


def run(args) -> int:
    if args.links < 0:  # -1 showed every link but the last
        raise InputError(f"--links {args.links}: give how many of the busiest links to show "
                         "(0 or more)")
    sizes = _inputs.sizes(args.sizes)
    sched = _inputs.load_schedule(args.schedule)
    topo = _inputs.topology(args.topology)
    proof = check(sched, topo)
    if proof.malformed:
        raise VerificationError(
            f"{args.schedule}: malformed for {topo.name} ({proof.problems[0].message}); "
            "nothing can time it, --unverified or not: fix it (ccweave verify names the "
            "problems)")
    if not proof.ok and not args.unverified:
        raise VerificationError(
            f"{args.schedule}: not proven on {topo.name} ({proof.problems[0].message}); "
            "simulate times proven schedules only: fix it (ccweave verify names the "
            "problems), or pass --unverified to time it anyway")
    results = [simulate(sched, topo, size) for size in sizes]
    if args.json:
        _output.print_json([{"size_bytes": r.size_bytes, "time_s": r.time_s,
                             "algbw_GBps": r.algbw / GB_PER_S, "busbw_GBps": r.busbw / GB_PER_S,
                             "busiest_links": r.busiest_links(max(args.links, 5)),
                             "verified": proof.ok}
                            for r in results])
        return 0
    unit, scale = _output.time_unit(r.time_s for r in results)
    rows = [(format_size(r.size_bytes), r.time_s / scale, r.algbw / GB_PER_S,
             r.busbw / GB_PER_S) for r in results]
    verdict = "proven" if proof.ok else "UNPROVEN: the times may mean nothing"
    _output.print_table(f"{sched.name or args.schedule} on {topo.name} ({verdict})",
                        ["size", f"time({unit})", "algbw(GB/s)", "busbw(GB/s)"], rows)
    if args.links:
        _output.print_table("busiest links", ["link", "utilisation"],
                            results[-1].busiest_links(args.links))
    if not proof.ok:
        _output.console.print(f"UNPROVEN: {_output.plain(proof.problems[0].message)}")
    return 0
