"""`kir import-omp SOURCE -o KIRDIR`: convert LLVM's own OpenMP kernel records (written
by libomptarget with `LIBOMPTARGET_RECORD=1`: `<kernel>.json`, `.image`, `.globals`,
`.memory`, `.original.output`) into kir records, one per recorded kernel.
docs/omp-records.md has the mapping. Everything is checked before anything is written;
a malformed file is an error naming the file and the byte offset or JSON field (exit 2)."""
from __future__ import annotations

import json
import sys

from kir.envelope import add_json_argument, envelope
from kir.omp_record import convert
from kir.progress import Progress, add_argument as add_progress_argument
from kir.words import plural

SCHEMA = "kir.import-omp/1"


def add_arguments(parser) -> None:
    parser.add_argument("source", metavar="SOURCE",
                        help="the folder the app ran in with LIBOMPTARGET_RECORD=1, or one <kernel>.json there")
    parser.add_argument("-o", "--output", metavar="KIRDIR", required=True,
                        help="the kir recording directory to write the records into")
    parser.add_argument("--check", action="store_true", help="read and check everything, write nothing")
    add_json_argument(parser, help=f"one JSON object ({SCHEMA})")
    add_progress_argument(parser)


def run(args) -> int:
    with Progress("converting kernels") as progress:
        imported = convert(args.source, args.output, write=not args.check, progress=progress.callback)
    for item in imported:
        for warning in item.warnings:
            print(f"kir: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(envelope(SCHEMA, source=args.source, output=args.output,
                                  records=[i.to_json() for i in imported])))
        return 0
    for i in imported:
        print(f"{i.kernel}  {i.image}  {plural(i.globals, 'global')}  -> {i.record or '(checked)'}")
    verb = "checked" if args.check else f"written to {args.output}"
    print(f"{plural(len(imported), 'record')} {verb}")
    return 0


__all__ = ["add_arguments", "run", "SCHEMA"]
