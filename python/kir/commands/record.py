"""`kir record -- APP ARGS...`: run an app under the hook layer with the recorder
client (libkir_record.so), which writes one record per selected launch — its
arguments and every byte it read and wrote — into a recording directory
(docs/record-format.md). The app's output and exit status pass through; a
summary line follows on stderr — or, when a signal killed the app, one line that
names it and counts the records it completed before (docs/recording.md, Crashes).
Replay a record with `kir replay`. Everything from the app's path on (or after
`--`) is the app's command line, never read by kir."""
from __future__ import annotations

import sys
from pathlib import Path

from kir.app import (
    exit_status,
    gpu_driver_problem,
    hooked_environment,
    library,
    run_app_process,
    signal_name,
    uses_gpu,
)
from kir.commands.app import add_kernel_argument, add_program_argument, command_of, warn_if_static_runtime
from kir.errors import OptionError
from kir.kernel_pattern import HELP as KERNEL_HELP
from kir.record import RECORD_SUFFIX, Record, RecordError, check_output_directory
from kir.recorder import recorder_environment
from kir.words import plural


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", default="kir-records", metavar="DIR",
                        help="the recording directory (default: kir-records)")
    add_kernel_argument(parser, f"only launches of kernels whose {KERNEL_HELP}")
    parser.add_argument("--max-per-kernel", type=int, default=4, metavar="N",
                        help="record at most N launches of each kernel (default 4; 0: no limit)")
    parser.add_argument("--skip", type=int, default=0, metavar="N",
                        help="skip the first N launches of each kernel")
    parser.add_argument("--ranks", metavar="LIST", help="only these MPI ranks (e.g. 0,3)")
    parser.add_argument("--reachable", action="store_true",
                        help="snapshot only the allocations the arguments point into")
    parser.add_argument("--va-base", metavar="HEX", help="where to reserve the VA range (hex address)")
    parser.add_argument("--va-size", metavar="BYTES", help="size of the VA range (e.g. 64G)")
    parser.add_argument("--no-va", action="store_true",
                        help="reserve no VA range (records get va_range nil: replays map exact addresses)")
    parser.add_argument("--ir", action="append", default=[], metavar="PATH",
                        help="where the IR of OpenMP target regions is (a bitcode file, an object or binary "
                             "with IR in .llvm.offloading; repeatable): given to the records of those regions, "
                             "matched by region identity, as the app's own IR is (docs/openmp.md)")
    add_program_argument(parser)


def run(args) -> int:
    command = command_of(args.program, "kir record [OPTIONS] [--] APP ARGS...")
    directory = Path(args.output).resolve()
    settings = recorder_environment(directory, kernels=args.kernel, max_per_kernel=args.max_per_kernel,
                                    skip=args.skip, ranks=args.ranks, reachable=args.reachable,
                                    va_base=args.va_base, va_size=args.va_size, no_va=args.no_va)
    check_output_directory(directory)  # before the app runs: a file or someone's folder is refused
    for path in args.ir:
        if not Path(path).is_file():
            raise OptionError(f"--ir {path}: no such file")
    env = hooked_environment([library("libkir_record.so")])
    env.update(settings)
    warn_if_static_runtime(command[0])
    before = snapshot_of(directory)
    app = run_app_process(command, env)
    if app.returncode < 0:
        print(crash_summary(directory, before, -app.returncode, app.pid), file=sys.stderr)
        attach_openmp_ir(directory, before, command, args.ir)
        return exit_status(app.returncode)
    print(summary(directory, before), file=sys.stderr)
    attach_openmp_ir(directory, before, command, args.ir)
    if not written_since(directory, before) and uses_gpu(command) and (problem := gpu_driver_problem()):
        print(f"kir: error: nothing was recorded: no usable GPU driver on this machine ({problem})",
              file=sys.stderr)
        return app.returncode or 1
    return app.returncode


def attach_openmp_ir(directory: Path, before: dict[Path, int], command: list[str], extra: list[str]) -> None:
    """The IR of the OpenMP regions recorded now, from the app's executable and the
    --ir files (kir.omp.attach_region_ir), each attachment said on stderr."""
    from kir.omp import region_key
    written = written_since(directory, before)
    regions = [p for p in written if region_key(Record.load(p).kernel.name)]
    if not regions:
        return
    from kir.errors import llvmlite_installed
    if not llvmlite_installed():
        print(f"kir: {plural(len(regions), 'OpenMP region record')} without IR: reading IR needs llvmlite "
              "(pip install 'kir-kernel-ir[ir]')", file=sys.stderr)
        return
    import shutil

    from kir.omp import attach_region_ir
    executable = shutil.which(command[0]) or command[0]
    attached, missing = attach_region_ir(directory, [executable, *extra], records=regions)
    for path, source in attached:
        print(f"kir: {path.name}: the region's IR from {source}", file=sys.stderr)
    if missing:
        print(f"kir: no IR found for {', '.join(missing)} (in {executable}"
              f"{''.join(', ' + e for e in extra)}): those records replay from the image only", file=sys.stderr)


def snapshot_of(directory: Path) -> dict[Path, int]:
    """Each record file already there, with its modification time."""
    records = directory / "records"
    if not records.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in records.glob(f"*{RECORD_SUFFIX}")}


def written_since(directory: Path, before: dict[Path, int]) -> list[Path]:
    """The records this run wrote (new, or rewritten since it started)."""
    after = snapshot_of(directory)
    return [p for p, mtime in sorted(after.items()) if before.get(p) != mtime and not p.name.startswith(".")]


def crash_summary(directory: Path, before: dict[Path, int], signal: int, pid: int) -> str:
    """'kir: the app was killed by SIGSEGV; 1 launch recorded before it (DIR/records,
    complete)': each record this run wrote read in full (every chunk's checksum).
    The unfinished files the app's writer left (temporaries named with its pid,
    which readers skip) are removed."""
    written = written_since(directory, before)
    bad = 0
    for path in written:
        try:
            Record.load(path).check()
        except RecordError:
            bad += 1
    removed = 0
    for folder in ("records", "chunks"):
        for leftover in (directory / folder).glob(f".*.{pid}.*.tmp") if (directory / folder).is_dir() else ():
            try:
                leftover.unlink()
                removed += 1
            except OSError:
                pass
    good = len(written) - bad
    state = "complete" if not bad else f"{bad} unreadable: kir records {directory}"
    unfinished = f"; {removed} unfinished file(s) of the launch in flight removed" if removed else ""
    return (f"kir: the app was killed by {signal_name(signal)}; {plural(good, 'launch')} "
            f"recorded before it ({directory / 'records'}, {state}){unfinished}")


def summary(directory: Path, before: dict[Path, int]) -> str:
    """'kir: recorded N launches of M kernels in DIR (X MiB stored)': the records this
    run wrote (new, or rewritten since it started)."""
    written = written_since(directory, before)
    kernels, stored, bad = set(), 0, 0
    for path in written:
        try:
            record = Record.load(path)
        except RecordError:
            bad += 1
            continue
        kernels.add(record.kernel.static_hash)
        stored += record.stats.stored_bytes
    unreadable = f"; {bad} unreadable (kir records {directory})" if bad else ""
    return (f"kir: recorded {plural(len(written), 'launch')} of {plural(len(kernels), 'kernel')} in {directory} "
            f"({stored / (1 << 20):.1f} MiB stored){unreadable}")


__all__ = ["add_arguments", "crash_summary", "run", "snapshot_of", "summary", "written_since"]
