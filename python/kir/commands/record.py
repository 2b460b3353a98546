"""`kir record -- APP ARGS...`: run an app under the hook layer with the recorder
client (libkir_record.so), which writes one record per selected launch — its
arguments and every byte it read and wrote — into a recording directory
(docs/record-format.md). The app's output and exit status pass through; a
summary line follows on stderr. Replay a record with `kir replay`."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from kir.commands.app import command_of, hooked_environment, library, run_app, warn_if_static_runtime

SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def add_arguments(parser) -> None:
    parser.add_argument("-o", "--output", default="kir-records", metavar="DIR",
                        help="the recording directory (default: kir-records)")
    parser.add_argument("--kernels", metavar="REGEX",
                        help="only kernels whose mangled or demangled name matches")
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
    parser.add_argument("program", nargs="+", metavar="-- APP ARGS", help="the program to run")


def run(args) -> int:
    command = command_of(args.program, "kir record -- APP ARGS...")
    directory = Path(args.output).resolve()
    settings = recorder_environment(args, directory)
    env = hooked_environment([library("libkir_record.so")])
    env.update(settings)
    warn_if_static_runtime(command[0])
    before = snapshot_of(directory)
    status = run_app(command, env)
    print(summary(directory, before), file=sys.stderr)
    return status


def recorder_environment(args, directory: Path) -> dict[str, str]:
    """The KIR_RECORD_* variables the recorder reads, from the options (checked here,
    so a typo is an error before the app runs, not a silently ignored variable)."""
    env = {"KIR_RECORD_DIR": str(directory),
           "KIR_RECORD_MAX_PER_KERNEL": str(non_negative(args.max_per_kernel, "--max-per-kernel")),
           "KIR_RECORD_SKIP": str(non_negative(args.skip, "--skip"))}
    if args.kernels:
        try:
            re.compile(args.kernels)
        except re.error as error:
            raise ValueError(f"--kernels {args.kernels!r}: {error}") from None
        env["KIR_RECORD_KERNELS"] = args.kernels
    if args.ranks:
        env["KIR_RECORD_RANKS"] = ",".join(str(r) for r in ranks(args.ranks))
    if args.reachable:
        env["KIR_RECORD_REACHABLE"] = "1"
    if args.no_va and (args.va_base or args.va_size):
        raise ValueError("--no-va contradicts --va-base/--va-size")
    if args.no_va:
        env["KIR_RECORD_NO_VA"] = "1"
    if args.va_base:
        env["KIR_RECORD_VA_BASE"] = f"{hex_address(args.va_base):#x}"
    if args.va_size:
        env["KIR_RECORD_VA_SIZE"] = str(byte_count(args.va_size))
    return env


def non_negative(n: int, option: str) -> int:
    if n < 0:
        raise ValueError(f"{option} {n}: must not be negative")
    return n


def ranks(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise ValueError(f"--ranks {text!r}: expected a comma-separated list of ranks, e.g. 0,3")
    return [int(p) for p in parts]


def hex_address(text: str) -> int:
    try:
        value = int(text, 16)
    except ValueError:
        raise ValueError(f"--va-base {text!r}: expected a hex address, e.g. 0x7f0000000000") from None
    if value <= 0:
        raise ValueError(f"--va-base {text!r}: must be above 0")
    return value


def byte_count(text: str) -> int:
    """'64G', '512m', '1048576' -> bytes (binary units)."""
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)(?:i?b)?", text.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"--va-size {text!r}: expected a size in bytes, e.g. 68719476736 or 64G")
    return int(match.group(1)) * SUFFIXES[match.group(2)]


def snapshot_of(directory: Path) -> dict[Path, int]:
    """Each record file already there, with its modification time."""
    records = directory / "records"
    if not records.is_dir():
        return {}
    return {p: p.stat().st_mtime_ns for p in records.glob("*.kirrec")}


def summary(directory: Path, before: dict[Path, int]) -> str:
    """'kir: recorded N launches of M kernels in DIR (X MiB stored)': the records this
    run wrote (new, or rewritten since it started)."""
    from kir.record import Record, RecordError
    after = snapshot_of(directory)
    written = [p for p, mtime in sorted(after.items()) if before.get(p) != mtime and not p.name.startswith(".")]
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
    return (f"kir: recorded {len(written)} launches of {len(kernels)} kernels in {directory} "
            f"({stored / (1 << 20):.1f} MiB stored){unreadable}")
