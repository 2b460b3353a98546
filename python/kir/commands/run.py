"""`kir run --jit-cache DIR -- APP ARGS...`: run an app under the hook layer with
the reference JIT client (libkir_jit.so): each launch of a kernel with
runtime-constant arguments (every kernel with --all) is looked up in the
kernel-object cache under its JIT key; a hit launches the cached code instead
(hook API 4 launch override), a miss runs the original and prints, once per
key, the `kir jit compile` command that fills it. The compile options given here
must be those the entries were compiled with: they are part of the key. The
app's output and exit status pass through; one summary line follows on stderr
(hits, misses, launches substituted, time added per launch), and --stats FILE
writes it as JSON; when a signal killed the app, the line names the signal. Everything from the app's path on (or after `--`) is the
app's command line, never read by kir."""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from kir import jit
from kir.app import finish, hooked_environment, library, run_app_process
from kir.commands.app import add_program_argument, command_of
from kir.errors import OptionError
from kir.jit.client import client_environment


def add_arguments(parser) -> None:
    parser.add_argument("--jit-cache", required=True, metavar="DIR", help="the kernel-object cache")
    parser.add_argument("--all", action="store_true",
                        help="look up every kernel, not only those with runtime-constant arguments")
    parser.add_argument("--specialize", metavar="grid,block", default="",
                        help="the cached code was compiled for the launch's grid and/or block")
    parser.add_argument("--bounds", metavar="MAXT[,MINB]", help="the cached code's launch bounds")
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-O", dest="opt", type=int, choices=range(4), metavar="0-3",
                       help="the optimization level the entries were compiled at (default 3)")
    level.add_argument("--pipeline", metavar="TEXT", help="... or their pass pipeline")
    parser.add_argument("--codegen-opt", type=int, choices=range(4), metavar="0-3")
    parser.add_argument("--ptx-version", type=int, metavar="NN")
    parser.add_argument("--features", default="", metavar="LIST")
    parser.add_argument("--ptx", action="store_true", help="the entries are PTX")
    parser.add_argument("--ptxas-option", action="append", default=[], metavar="OPT")
    parser.add_argument("--keep-other-kernels", action="store_true")
    parser.add_argument("--fp-contract", choices=("auto", "fast", "on", "off"), default="auto",
                        help="the contraction the entries were compiled with (default auto)")
    parser.add_argument("--stats", metavar="FILE", help="write the client's counters here as JSON")
    add_program_argument(parser)


def run(args) -> int:
    command = command_of(args.program, "kir run --jit-cache DIR [OPTIONS] [--] APP ARGS...")
    cache = Path(args.jit_cache)
    if cache.exists() and not cache.is_dir():
        raise OptionError(f"--jit-cache {cache}: not a directory")
    unknown = set(filter(None, args.specialize.split(","))) - {"grid", "block"}
    if unknown:
        raise OptionError(f"--specialize {args.specialize!r}: expected grid, block or grid,block")
    from kir.jit.values import parse_bounds
    bounds = parse_bounds(args.bounds) if args.bounds else None
    options = jit.Options(opt_level=3 if args.opt is None else args.opt, pipeline=args.pipeline,
                          codegen_opt=args.codegen_opt, ptx_version=args.ptx_version, features=args.features,
                          kind="ptx" if args.ptx else "cubin", assembler_options=tuple(args.ptxas_option),
                          keep_other_kernels=args.keep_other_kernels, fp_contract=args.fp_contract)
    fd, stats_path = tempfile.mkstemp(prefix="kir-jit-", suffix=".json")
    os.close(fd)
    try:
        env = hooked_environment([library("libkir_jit.so")])
        env.update(client_environment(cache, options, all_kernels=args.all,
                                      specialize_grid="grid" in args.specialize,
                                      specialize_block="block" in args.specialize,
                                      bounds=bounds, stats=stats_path))
        app = run_app_process(command, env)
        stats = read_stats(Path(stats_path))
    finally:
        os.unlink(stats_path)
    if stats is None:
        if app.returncode >= 0:  # killed: finish() says so
            print("kir: jit: the client wrote no counters (the app never loaded the hook, or ended without "
                  "running its exit handlers)", file=sys.stderr)
    else:
        errors = f", {stats['errors']} errors (refused or unreadable: see above)" if stats.get("errors") else ""
        print(f"kir: jit: {stats['launches']} launches looked up in {stats['cache']}: {stats['hits']} hits, "
              f"{stats['misses']} misses, {stats['substituted']} substituted, "
              f"{stats['added_ns_per_launch']:.0f} ns added per launch{errors}", file=sys.stderr)
        if args.stats:
            Path(args.stats).write_text(json.dumps(stats, indent=1) + "\n")
    return finish(app, "kir: jit")


def read_stats(path: Path) -> dict | None:
    """The client's counters (JSON), None when it wrote none or something unreadable."""
    from kir.errors import KirError
    from kir.files import load_json
    try:
        return load_json(path)
    except KirError:
        return None


__all__ = ["add_arguments", "read_stats", "run"]
