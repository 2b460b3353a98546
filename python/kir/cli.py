"""The `kir` command line. Exit status: 0 success, 1 a check failed (`kir replay`: the
output differs from the recording; `kir cache verify`: an entry is damaged; `kir inspect
--require`: a binary lacks what it asks), 2 bad input or usage; `kir trace`/`kir record`/`kir
run`: the app's. A closed output pipe (`kir inspect ... | head -1`) ends kir quietly with
status 141, as a program killed by SIGPIPE reports in a shell.

Bad input is a `kir.errors.KirError` (bad option values: its `OptionError`) or an
OSError (a file that cannot be read or written): printed as `kir: error: ...`, exit
2. Any other exception is a bug in kir and shows its traceback."""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from kir.errors import KirError

#: verb -> (its module under kir.commands, help). A module is imported only for the
#: verb that runs (issue 15: `kir inspect` must not import llvmlite, cuda-bindings or
#: the record and replay modules; tests/cli/test_startup.py checks it).
COMMANDS = {
    "inspect": ("inspect", "show the device code a binary holds"),
    "extract": ("extract", "write each device image to a directory"),
    "diff": ("diff", "the kernels added, removed and changed between two binaries"),
    "hash": ("hash", "print the kir hash of every kernel, or build a JIT key or a launch identity"),
    "trace": ("trace", "run an app under the hook layer and print its registrations and launches"),
    "record": ("record", "run an app and record kernel launches (arguments and memory) for replay"),
    "records": ("records", "list the launches a recording holds"),
    "replay": ("replay", "re-run a recorded launch alone and check its output"),
    "cache": ("cache", "list, show, remove or verify the entries of a kernel-object cache"),
    "jit": ("jit", "compile a kernel from its IR, specialized (kir jit compile)"),
    "run": ("run", "run an app with the JIT client: launches whose JIT key the cache holds run the cached code"),
    "tune": ("tune", "search launch configuration and compile options of recorded launches (Optuna) and hand "
                     "the winner to the JIT client's cache"),
    "import-mneme": ("import_mneme", "convert a Mneme recording into kir records, replayable from the IR"),
    "import-omp": ("import_omp", "convert LLVM's OpenMP kernel records (LIBOMPTARGET_RECORD) into kir records"),
    "completion": ("completion", "print a bash or zsh completion script (source <(kir completion bash))"),
}


def command_module(verb: str):
    import importlib
    return importlib.import_module(f"kir.commands.{COMMANDS[verb][0]}")


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb the command line names (its first word that is not an option)."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def version_text() -> str:
    """`kir --version`: the package (its distribution's name and version), the libkir it
    runs on (version and C ABI: KIR_VERSION_MAJOR, the SONAME's number where the
    library has one: a `cmake --install` prefix's libkir.so.N; a wheel ships libkir.so)
    and the hook API clients are built against (kir/hooks.h KIR_HOOK_API_VERSION)."""
    from importlib import metadata

    import kir
    from kir.errors import distribution_name
    name = distribution_name()
    try:
        dist = f"{name} {metadata.version(name)}"
    except metadata.PackageNotFoundError:  # run from a source tree
        dist = "kir (not installed)"
    return f"{dist}\nlibkir {kir.__version__} (C ABI {kir.abi_version})\nhook API {kir.hook_api_version}"


def make_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `verb`, only that verb is defined (its module alone imported);
    with "", every verb without its options (the top-level usage); without, every
    verb's options (for completion and documentation)."""
    parser = argparse.ArgumentParser(prog="kir", description="Find the GPU code inside binaries.")
    parser.add_argument("--version", action=VersionAction, nargs=0,
                        help="print the package's, libkir's and the hook API's versions and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.verbs = {}  # name -> its parser (parse: an unknown option is the verb's usage error)
    for name, (_, help_text) in COMMANDS.items():
        if verb and name != verb:
            continue  # the verb is known: the others' parsers would only cost start-up time
        p = parser.verbs[name] = sub.add_parser(name, help=help_text, description=help_text)
        if verb != "":  # "": the top-level usage, no verb's options
            command_module(name).add_arguments(p)
    return parser


def run_pretty(module, args) -> int:
    """`module.run(args)` with its one JSON document indented (--pretty): what it prints
    is read back and written again with indent=2, so every verb's document is the one
    --json gives (docs/json-schema.md). A verb that printed several (`kir replay --json`
    of several launches) has each indented."""
    import io
    import json
    from contextlib import redirect_stdout

    from kir.errors import OptionError
    if not getattr(args, "json", False):
        raise OptionError("--pretty: only with --json")
    compact = io.StringIO()
    with redirect_stdout(compact):
        status = module.run(args)
    text, at, decoder = compact.getvalue(), 0, json.JSONDecoder()
    while (at := len(text) - len(text[at:].lstrip())) < len(text):  # each document it printed
        try:
            document, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:  # not JSON (a verb's text after its document): as it was
            sys.stdout.write(text[at:])
            break
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    return status


def parse(parser: argparse.ArgumentParser, words: list[str]) -> argparse.Namespace:
    """parse_args, except that arguments no option takes are reported with the verb's
    usage (`kir inspect --bogus` shows inspect's options, not the list of verbs)."""
    args, extra = parser.parse_known_args(words)
    if extra:
        where = parser.verbs.get(getattr(args, "command", None), parser)
        where.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


class VersionAction(argparse.Action):
    """--version: computed only when asked (it imports the bindings)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


#: The exit status after a closed output pipe: a shell's for a program SIGPIPE killed.
CLOSED_PIPE = 141


def silence_stdout() -> None:
    """After a closed output pipe: stdout goes to /dev/null, so that Python's flush
    at exit is not an "Exception ignored" message."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        verb = verb_of(words)
        args = parse(make_parser(verb or ""), words)  # "": no verb's module imported
        if getattr(args, "no_progress", False):
            from kir import progress
            progress.disable()
        module = command_module(args.command)
        status = run_pretty(module, args) if getattr(args, "pretty", False) else module.run(args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then this BrokenPipeError
        return status
    except BrokenPipeError:  # `kir inspect ... | head`: the reader left, stop quietly
        silence_stdout()
        return CLOSED_PIPE
    except (KirError, OSError) as error:  # bad input, or a file that cannot be read or written
        print(f"kir: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


__all__ = ["CLOSED_PIPE", "command_module", "COMMANDS", "main", "make_parser", "run_pretty", "silence_stdout", "verb_of",
           "version_text", "VersionAction"]


if __name__ == "__main__":
    sys.exit(main())
