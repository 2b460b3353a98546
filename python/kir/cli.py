"""The `kir` command line. Exit status: 0 success, 2 bad input or usage (`kir replay`:
1 when the output differs from the recording; `kir cache verify`: 1 when an entry is damaged; `kir trace`/`kir record`/`kir run`: the app's).

Bad input is a `kir.errors.KirError` (bad option values: its `OptionError`) or an
OSError (a file that cannot be read or written): printed as `kir: error: ...`, exit
2. Any other exception is a bug in kir and shows its traceback."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kir.errors import KirError
from kir.commands import (cache, extract, hash as hash_command, import_mneme, inspect, jit, record, records,
                          replay, run as run_command, trace, tune)

COMMANDS = {
    "inspect": (inspect, "show the device code a binary holds"),
    "extract": (extract, "write each device image to a directory"),
    "hash": (hash_command, "print the kir hash of every kernel, or build a JIT key or a launch identity"),
    "trace": (trace, "run an app under the hook layer and print its registrations and launches"),
    "record": (record, "run an app and record kernel launches (arguments and memory) for replay"),
    "records": (records, "list the launches a recording holds"),
    "replay": (replay, "re-run a recorded launch alone and check its output"),
    "cache": (cache, "list, show, remove or verify the entries of a kernel-object cache"),
    "jit": (jit, "compile a kernel from its IR, specialized (kir jit compile)"),
    "run": (run_command, "run an app with the JIT client: launches whose JIT key the cache holds run the "
                         "cached code"),
    "tune": (tune, "search launch configuration and compile options of recorded launches (Optuna) and hand "
                   "the winner to the JIT client's cache"),
    "import-mneme": (import_mneme, "convert a Mneme recording into kir records, replayable from the IR"),
}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kir", description="Find the GPU code inside binaries.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    module = COMMANDS[args.command][0]
    try:
        return module.run(args)
    except BrokenPipeError:  # `kir inspect ... | head`: the reader left, stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (KirError, OSError) as error:  # bad input, or a file that cannot be read or written
        print(f"kir: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

if __name__ == "__main__":
    sys.exit(main())
