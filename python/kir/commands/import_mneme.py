"""`kir import-mneme DIR -o KIRDIR`: convert a Mneme recording (`<static>.json`,
`RecordedIR_<static>.bc`, `DeviceState.{prologue,epilogue}.<static>.<dynamic>.mneme`)
into kir records, one per recorded instance, replayable from the IR
(`kir replay RECORD --code ir`). docs/mneme.md has the mapping. The whole recording is
checked before anything is written; a malformed file is an error naming the file and
the byte offset (exit 2). `--app BINARY` keys the records by the app's static hash
(kir.mneme.find_in_app)."""
from __future__ import annotations

import json
import sys

from kir.envelope import add_json_argument, envelope
from kir.mneme import convert
from kir.progress import Progress, add_argument as add_progress_argument
from kir.words import plural

SCHEMA = "kir.import-mneme/1"


def add_arguments(parser) -> None:
    parser.add_argument("directory", metavar="DIR", help="the Mneme recording folder (mneme record)")
    parser.add_argument("-o", "--output", metavar="KIRDIR", required=True,
                        help="the kir recording directory to write the records into")
    parser.add_argument("--app", metavar="BINARY",
                        help="the app Mneme recorded: each kernel is found in it by name and its records take "
                             "the static hash kir computes for the app's launches (and the app's image), so a "
                             "tuned result is found by the running app; a kernel it lacks keeps the hash of "
                             "Mneme's module, with a warning")
    parser.add_argument("--check", action="store_true", help="read and check everything, write nothing")
    add_json_argument(parser, help=f"one JSON object ({SCHEMA})")
    add_progress_argument(parser)


def run(args) -> int:
    with Progress("converting instances") as progress:
        imported = convert(args.directory, args.output, write=not args.check,
                           progress=progress.callback, app=args.app)
    for item in imported:
        for warning in item.warnings:
            print(f"kir: warning: {warning}", file=sys.stderr)
    if args.json:
        print(json.dumps(envelope(SCHEMA, source=args.directory, output=args.output,
                          records=[i.to_json() for i in imported])))
        return 0
    for i in imported:
        target = i.record or "(checked)"
        print(f"{i.mneme_static}.{i.mneme_dynamic}  {i.kernel}  {plural(i.regions, 'region')}  -> {target}")
    verb = "checked" if args.check else f"written to {args.output}"
    print(f"{plural(len(imported), 'record')} {verb}")
    return 0


__all__ = ["add_arguments", "run", "SCHEMA"]
