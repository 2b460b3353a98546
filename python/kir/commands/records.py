"""`kir records DIR`: the launches a recording holds — kernel, hashes, grid, block,
regions, bytes snapshotted and stored, flags — and the chunks on disk.
A record that cannot be read, or names a chunk that is missing or corrupt, is
reported (exit 2) after the others are listed. Names from the records (a kernel's,
a file's) are printed with control characters escaped (kir.commands.printable)."""
from __future__ import annotations

import json
import sys

from kir.commands.printable import printable
from kir.envelope import add_json_argument, envelope
from kir.record import Record, RecordError, Recording
from kir.words import plural

SCHEMA = "kir.records/1"


def add_arguments(parser) -> None:
    parser.add_argument("directory", metavar="DIR", help="the recording (kir record -o DIR)")
    add_json_argument(parser, help=f"one JSON object ({SCHEMA})")


def run(args) -> int:
    recording = Recording(args.directory)
    records, errors = load_all(recording)
    chunks = {"count": len(recording.chunk_paths), "bytes": recording.chunk_bytes()}
    if args.json:
        print(json.dumps(envelope(SCHEMA, directory=str(recording.directory),
                          records=[entry(r) for r in records], chunks=chunks)))
    else:
        print_table(records, chunks, recording)
    for message in errors:
        print(f"kir: error: {printable(message)}", file=sys.stderr)
    return 2 if errors else 0


def load_all(recording: Recording) -> tuple[list[Record], list[str]]:
    """The records that load with every chunk they name intact, and the error message
    of each that does not."""
    records, errors = [], []
    for path in recording.record_paths:
        try:
            record = Record.load(path)
            record.check()  # every chunk it names, as a replay would read them
            records.append(record)
        except RecordError as error:
            errors.append(str(error))
    return records, errors


def entry(r: Record) -> dict:
    """A record as an element of the JSON `records` list."""
    return {"file": r.path.name, "kernel": r.kernel.name, "demangled": r.kernel.demangled,
            "static_hash": r.kernel.static_hash, "launch_identity": r.launch.launch_identity,
            "dynamic_hash": r.launch.dynamic_hash,
            "grid": list(r.launch.grid), "block": list(r.launch.block),
            "shared_bytes": r.launch.shared_bytes, "ordinal": r.launch.ordinal,
            "allocations": len(r.allocations), "globals": len(r.globals),
            "prologue_bytes": r.stats.prologue_bytes, "stored_bytes": r.stats.stored_bytes,
            "flags": r.flag_names}


def mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


COLUMNS = ("static", "identity", "grid", "block", "#", "allocs", "snapshot", "stored", "flags", "kernel")


def print_table(records: list[Record], chunks: dict, recording: Recording) -> None:
    rows = [COLUMNS] + [row(r) for r in records]
    widths = [max(len(x[i]) for x in rows) for i in range(len(COLUMNS) - 1)]
    for line in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1])
    print(f"{plural(len(records), 'record')}, {plural(chunks['count'], 'chunk')} ({mib(chunks['bytes'])}) "
          f"in {printable(str(recording.directory / 'chunks'))}")


def row(r: Record) -> tuple[str, ...]:
    launch = r.launch
    identity = launch.identity if launch.launch_identity is not None else f"{launch.identity[:10]}v1"  # version 1
    return (r.kernel.static_hash[:12], identity[:12],
            ",".join(map(str, launch.grid)), ",".join(map(str, launch.block)), str(launch.ordinal),
            f"{len(r.allocations)}+{len(r.globals)}g" if r.globals else str(len(r.allocations)),
            mib(r.stats.prologue_bytes), mib(r.stats.stored_bytes), printable(",".join(r.flag_names)) or "-",
            printable(r.kernel.demangled))


__all__ = ["add_arguments", "COLUMNS", "entry", "load_all", "mib", "print_table", "row", "run", "SCHEMA"]
