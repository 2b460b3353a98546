"""`kir replay RECORD`: re-run one recorded launch alone on this machine's GPU and
check its output against the recording. `--plan` prints what a replay would do
(no GPU). Exit status: 0 the output matches (or --no-verify), 1 it differs,
2 the record or the GPU could not be used.

`kir replay --all DIR`: a regression run — every record of the recording, in
this process one after another, or fanned out over Dask workers (`--workers N`:
a cluster of worker processes on this machine, one per GPU by default;
`--scheduler ADDRESS` / `--scheduler-file FILE`: a running cluster); a table of
passed / failed / errors and times (against `--baseline`, an earlier run's
`--json`). Exit status: 1 when any record's output differs, else 2 when any record
could not be replayed (or DIR is not a recording, or holds no records), else 0."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass

from kir.commands.replay_all import SCHEMA_ALL, ClusterOptions, run_all
from kir.commands.replay_variant import (
    VariantOptions,
    add_variant_arguments,
    describe_result,
    plan_variant,
    print_variant_plan,
)
from kir.envelope import add_json_argument, envelope
from kir.errors import OptionError
from kir.files import stdout_to_stderr
from kir.replay import CODE_KINDS, DTYPES, NORMS, Tolerance
from kir.replay.backends import BACKENDS

SCHEMA = "kir.replay/1"


def add_arguments(parser) -> None:
    parser.add_argument("record", metavar="RECORD", nargs="?", help="a .kirrec file (DIR/records/...)")
    parser.add_argument("--code", choices=CODE_KINDS, default="launched",
                        help="what to load: the code the launch ran (default: its cubin, or its PTX "
                             "when the driver compiled PTX; a HIP launch's AMDGPU code object), the "
                             "recorded cubin, its PTX, its LLVM IR compiled with llvmlite, or the "
                             "recorded code object")
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="the GPU API: cuda (cuda-bindings), hip (hip-python), or auto (default: "
                             "the record's, an AMDGPU code object is HIP)")
    parser.add_argument("--repeat", type=int, default=1, metavar="N", help="launch N times (timed)")
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="compare device memory with the recorded epilogues (default: on)")
    parser.add_argument("--grid", metavar="X,Y,Z", help="launch a variant with this grid")
    parser.add_argument("--block", metavar="X,Y,Z", help="launch a variant with this block")
    parser.add_argument("--shared-bytes", type=int, metavar="N", help="dynamic shared memory")
    tolerance = parser.add_argument_group("comparing with a tolerance (default: bitwise)")
    tolerance.add_argument("--atol", type=float, help="absolute tolerance")
    tolerance.add_argument("--rtol", type=float, help="relative tolerance")
    tolerance.add_argument("--ulp", type=int, metavar="N",
                           help="at most N units in the last place per element (of --dtype)")
    tolerance.add_argument("--norm", choices=NORMS, default="linf", help="norm of the difference")
    tolerance.add_argument("--dtype", choices=DTYPES, default="float32", help="element type of the outputs (default float32)")
    parser.add_argument("--plan", action="store_true", help="print the replay plan only (needs no GPU)")
    parser.add_argument("--device-arch", default=None, metavar="ARCH",
                        help="with --plan: the GPU to plan for (default sm_90; for a HIP record, its "
                             "code object's target, e.g. gfx942:sramecc+:xnack-)")
    add_json_argument(parser, help=f"print one JSON object ({SCHEMA}; with --all, {SCHEMA_ALL})")
    every = parser.add_argument_group("replaying a whole recording (a regression run)")
    every.add_argument("--all", metavar="DIR", dest="all",
                       help="replay every record of the recording DIR (kir record -o DIR): a table of "
                            "passed / failed / errors and times; exit 1 if any output differs")
    every.add_argument("--workers", metavar="N", nargs="?", const="auto",
                       help="with --all: fan out over Dask worker processes on this machine, N of them "
                            "(auto, or the option alone: one per GPU, each seeing its GPU as device 0; "
                            "one per CPU core without GPUs). Without --workers or --scheduler the "
                            "records replay in this process, one after another")
    every.add_argument("--scheduler", metavar="ADDRESS",
                       help="with --all: replay on the workers of a running Dask cluster "
                            "(tcp://host:8786; dask-jobqueue, dask-mpi, dask scheduler)")
    every.add_argument("--scheduler-file", metavar="FILE",
                       help="with --all: the same, the scheduler named by its scheduler file (dask-mpi)")
    every.add_argument("--baseline", metavar="JSON",
                       help=f"with --all: an earlier run's --json output ({SCHEMA_ALL}): each record's "
                            "time change against it")
    every.add_argument("--executor", metavar="MODULE:FUNCTION",
                       help="with --all: replay each record with FUNCTION(path, job) instead "
                            "(importable on the workers; returns a row, see kir.replay.batch)")
    from kir.progress import add_argument as add_progress_argument
    add_progress_argument(every)
    add_variant_arguments(parser)


@dataclass(frozen=True)
class ReplayOptions:
    """`kir replay`'s options, read from the command line once (`from_args`, checked
    there) and handed on: to kir.commands.replay_all for --all, to
    kir.commands.replay_variant for a variant."""
    record: str | None = None
    recording: str | None = None            #: --all DIR
    code: str = "launched"
    repeat: int = 1
    verify: bool = True
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    shared_bytes: int | None = None
    tolerance: Tolerance | None = None
    norm: str = "linf"
    plan: bool = False
    device_arch: str | None = None          #: --plan's device (None: planned_arch)
    backend: str = "auto"
    json: bool = False
    baseline: str | None = None
    executor: str | None = None
    cluster: ClusterOptions = ClusterOptions()
    variant: VariantOptions = VariantOptions()

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ReplayOptions:
        check_options(args)
        return cls(record=args.record, recording=args.all, code=args.code, repeat=positive(args.repeat),
                   verify=args.verify, grid=dims(args.grid, "--grid"), block=dims(args.block, "--block"),
                   shared_bytes=args.shared_bytes, tolerance=tolerance_of(args), norm=args.norm, plan=args.plan,
                   device_arch=args.device_arch, backend=args.backend, json=args.json, baseline=args.baseline, executor=args.executor,
                   cluster=ClusterOptions.from_args(args), variant=VariantOptions.from_args(args))

    def make_variant(self):
        """The kir.replay.Variant these options ask for."""
        return self.variant.build(self.grid, self.block, self.shared_bytes, self.repeat, self.tolerance)


def run(args: argparse.Namespace) -> int:
    opts = ReplayOptions.from_args(args)
    if opts.recording is not None:
        return run_all(opts)
    from kir.record import Record
    record = Record.load(opts.record)
    if opts.plan:
        return print_plan(record, opts)
    from kir.replay import Replayer
    variant = opts.make_variant() if opts.variant.asked else None
    if variant is not None and variant.timing == "activity":
        from kir.replay.activity import cupti
        cupti("kir replay --timing activity")  # not installed: the install hint, before the GPU is opened
    # with --json, stdout carries only the JSON: the kernel's printf goes to stderr
    with stdout_to_stderr(opts.json), Replayer(record, code=opts.code, cache=opts.variant.jit_cache,
                                                      backend=opts.backend) as replayer:
        warn_about(replayer.plan)
        for name in replayer.absent_globals:
            print(f"kir: warning: the {opts.code} code defines no global {name}: not restored", file=sys.stderr)
        if variant is None:
            result = replayer.run(grid=opts.grid, block=opts.block, shared_bytes=opts.shared_bytes,
                                  repeat=opts.repeat, verify=opts.verify, tolerance=opts.tolerance)
        else:
            result = replayer.run_variant(variant, opts.verify)
    report(record, replayer.plan, result, opts)
    return 1 if result.verified is False else 0


ALL_ONLY = ("workers", "scheduler", "scheduler_file", "baseline", "executor")
SINGLE_ONLY = {"grid": "--grid", "block": "--block", "shared_bytes": "--shared-bytes"}


def check_options(args: argparse.Namespace) -> None:
    """The options that go together: a RECORD or --all DIR, and each with its own."""
    if args.all is None and args.record is None:
        raise OptionError("give a RECORD, or --all DIR")
    if args.all is not None and args.record is not None:
        raise OptionError(f"give a RECORD or --all DIR, not both ({args.record} and --all {args.all})")
    if args.all is None:
        for name in ALL_ONLY:
            if getattr(args, name) is not None:
                raise OptionError(f"--{name.replace('_', '-')} needs --all DIR")
        return
    for name, option in SINGLE_ONLY.items():
        if getattr(args, name) is not None:
            raise OptionError(f"{option} launches a variant of one record: not with --all")
    if VariantOptions.wanted(args):
        raise OptionError("--specialize, --specialize-dims, --bounds, -O, --pipeline, --ptxas-option, "
                          "--fp-contract, --warmup and --jit-cache make a variant of one record: not with --all")


def print_plan(record, opts: ReplayOptions) -> int:
    from kir.replay import plan
    from kir.replay.backends import planned_arch
    record.check()  # every chunk a replay would read: present, whole, hashed as named
    device_arch = opts.device_arch or planned_arch(record, opts.backend)
    p = plan(record, code=opts.code, device_arch=device_arch)
    if opts.code == "ir":
        p.code_bytes()  # compile now: an IR that does not compile is an error of the plan
    if opts.variant.asked or opts.grid or opts.block or opts.shared_bytes is not None:
        variant_plan = plan_variant(record, opts.make_variant(), device_arch, opts.variant.jit_cache)
        print_variant_plan(p, variant_plan, opts.json)
    else:
        print(json.dumps(p.to_json()) if opts.json else p.describe())
    if not p.hashes_match:
        print(f"kir: warning: {record.path}: the record's hashes do not match its contents", file=sys.stderr)
    return 0


def warn_about(p) -> None:
    for note in p.notes:
        print(f"kir: warning: {note}", file=sys.stderr)


def report(record, p, result, opts: ReplayOptions) -> None:
    mismatches = [dataclasses.asdict(m) for m in result.mismatches]
    if opts.json:
        print(json.dumps(envelope(
            SCHEMA, record=str(record.path), code=p.code.kind,
            static_hash=record.kernel.static_hash, launch_identity=result.launch_identity,
            hashes_match=p.hashes_match, variant=result.variant, verified=result.verified,
            mismatches=mismatches, differences=[dataclasses.asdict(m) for m in result.differences],
            times_ms=result.times_ms, median_ms=result.median_ms,
            repeat=len(result.times_ms),
            **({"variant_result": result.summary()} if result.description else {}))))
        return
    print(f"{record.kernel.demangled}: {p.code.kind}, grid {','.join(map(str, result.grid))} "
          f"block {','.join(map(str, result.block))}{' (variant)' if result.variant else ''}: "
          f"median {result.median_ms:.3f} ms over {len(result.times_ms)}")
    if result.verified and result.differences:
        print("verified: output within the tolerance (" + (opts.tolerance.describe() if opts.tolerance else "the record's annotations") + ")")
    else:
        print({True: "verified: output matches the recording", False: "verified: OUTPUT DIFFERS",
               None: "not verified"}[result.verified])
    for m in result.differences:
        print(f"  {m.region}: {describe_difference(m)}")
    if result.description:
        print(describe_result(result))
    for m in result.mismatches:
        how = f"; {describe_difference(m)}" if m.norm is not None else ""
        print(f"  {m.region}: {m.differing_bytes} bytes differ, the first at offset {m.first_offset}{how}")


def describe_difference(m) -> str:
    """How much a region differed (a kir.replay Mismatch measured with a tolerance)."""
    parts = [f"{m.differing_bytes} bytes differ", f"max abs {m.max_abs:g}", f"max rel {m.max_rel:g}",
             f"max {m.max_ulp} ulp" + (f" (limit {m.ulp_limit})" if m.ulp_limit is not None else "")]
    if m.limit is not None:
        parts.append(f"norm {m.norm:g} (limit {m.limit:g})")
    return ", ".join(parts)


def tolerance_of(args: argparse.Namespace) -> Tolerance | None:
    return Tolerance.of(args.atol, args.rtol, args.ulp, args.norm, args.dtype)


def dims(text: str | None, option: str):
    if text is None:
        return None
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise OptionError(f"{option} {text!r}: expected three positive integers X,Y,Z")
    return tuple(int(p) for p in parts)


def positive(n: int) -> int:
    if n < 1:
        raise OptionError(f"--repeat {n}: must be at least 1")
    return n


__all__ = ["add_arguments", "ALL_ONLY", "check_options", "dims", "positive", "print_plan", "ReplayOptions",
           "describe_difference", "report", "run", "SCHEMA", "SINGLE_ONLY", "tolerance_of", "warn_about"]
