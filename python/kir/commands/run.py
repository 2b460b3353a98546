"""`kir run [--jit-cache DIR] -- APP ARGS...`: run an app under the hook layer with
the reference JIT client (libkir_jit.so): each launch of a kernel with
runtime-constant arguments (every kernel with --all) is looked up in the
kernel-object cache under its JIT key; a hit launches the cached code instead
(hook API 4 launch override). A miss is compiled by kir's compile service
(kir.jit.service: started here before the app, stopped when it ends, out of the
app's process): --mode sync (default) makes the launch wait for its code, async
runs the original until the code is ready. --no-compile: a miss runs the original
and prints, once per key, the `kir jit compile` command that fills it. The
compile options given here are part of the key. Proteus's PROTEUS_* settings
that have a kir meaning are honoured (one line says which, and which are
ignored); kir's options and KIR_JIT_* settings win over them. The app's output
and exit status pass through; one summary line follows on stderr (hits, misses,
compiled, launches substituted, time added per launch), and --stats FILE writes
it as JSON; when a signal killed the app, the line names the signal. Everything
from the app's path on (or after `--`) is the app's command line, never read by kir."""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from kir import jit
from kir.app import finish, hooked_environment, library, run_app_process
from kir.commands.app import add_program_argument, command_of
from kir.errors import KirError, OptionError
from kir.jit.client import client_environment, proteus_settings
from kir.words import plural


def add_arguments(parser) -> None:
    parser.add_argument("--jit-cache", metavar="DIR",
                        help="the kernel-object cache (default: $KIR_JIT_CACHE, else $PROTEUS_CACHE_DIR)")
    parser.add_argument("--mode", choices=("sync", "async"),
                        help="a miss waits for its code (sync, default) or runs the original meanwhile (async)")
    parser.add_argument("--no-compile", action="store_true",
                        help="compile nothing: a miss prints the command that fills it")
    parser.add_argument("--compile-workers", type=int, metavar="N",
                        help="compiles at a time (default 1, or $PROTEUS_ASYNC_THREADS)")
    parser.add_argument("--queue", type=int, default=64, metavar="N",
                        help="kernels waiting or compiling at most; past them the original runs (default 64)")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="sync: the longest a launch waits for its code (default 120000)")
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
    command = command_of(args.program, "kir run [--jit-cache DIR] [OPTIONS] [--] APP ARGS...")
    environ = os.environ
    proteus = proteus_settings(environ)
    unknown = set(filter(None, args.specialize.split(","))) - {"grid", "block"}
    if unknown:
        raise OptionError(f"--specialize {args.specialize!r}: expected grid, block or grid,block")
    from kir.jit.values import parse_bounds
    bounds = parse_bounds(args.bounds) if args.bounds else None
    # kir's options, then KIR_JIT_* settings, then Proteus's (docs/jit.md).
    temporary_cache = None
    cache_text = args.jit_cache or environ.get("KIR_JIT_CACHE")
    if cache_text:
        proteus.overridden("PROTEUS_CACHE_DIR", "--jit-cache" if args.jit_cache else "KIR_JIT_CACHE")
        proteus.overridden("PROTEUS_USE_STORED_CACHE", "--jit-cache" if args.jit_cache else "KIR_JIT_CACHE")
    elif proteus.use_stored_cache is False:
        temporary_cache = tempfile.mkdtemp(prefix="kir-jit-cache-")
        cache_text = temporary_cache
        proteus.overridden("PROTEUS_CACHE_DIR", "PROTEUS_USE_STORED_CACHE=0")
    else:
        cache_text = proteus.cache
    if not cache_text:
        raise OptionError("no cache: --jit-cache DIR (or KIR_JIT_CACHE, or PROTEUS_CACHE_DIR)")
    cache = Path(cache_text)
    if cache.exists() and not cache.is_dir():
        raise OptionError(f"--jit-cache {cache}: not a directory")
    mode = args.mode or environ.get("KIR_JIT_MODE")
    if mode:
        proteus.overridden("PROTEUS_ASYNC_COMPILATION", "--mode" if args.mode else "KIR_JIT_MODE")
    mode = mode or proteus.mode or "sync"
    workers = args.compile_workers
    if workers is not None:
        proteus.overridden("PROTEUS_ASYNC_THREADS", "--compile-workers")
    workers = workers if workers is not None else proteus.workers or 1
    if workers < 1 or args.queue < 1:
        raise OptionError("--compile-workers and --queue: expected >= 1")
    specialize = args.specialize or environ.get("KIR_JIT_SPECIALIZE", "")
    if args.specialize or "KIR_JIT_SPECIALIZE" in environ:
        proteus.overridden("PROTEUS_SPECIALIZE_DIMS", "--specialize" if args.specialize else "KIR_JIT_SPECIALIZE")
    elif proteus.specialize_dims:
        specialize = "grid,block"
    launch_bounds = False
    if bounds is not None or "KIR_JIT_BOUNDS" in environ:
        proteus.overridden("PROTEUS_SPECIALIZE_LAUNCH_BOUNDS", "--bounds" if bounds else "KIR_JIT_BOUNDS")
        launch_bounds = bounds is None and environ["KIR_JIT_BOUNDS"] == "launch"
        if bounds is None and not launch_bounds:
            bounds = parse_bounds(environ["KIR_JIT_BOUNDS"])
    else:
        launch_bounds = bool(proteus.launch_bounds)
    specialize_args = proteus.specialize_args is not False
    if "KIR_JIT_ARGS" in environ:
        proteus.overridden("PROTEUS_SPECIALIZE_ARGS", "KIR_JIT_ARGS")
        specialize_args = environ["KIR_JIT_ARGS"] != "0"
    disable = proteus.disable
    if "KIR_JIT_DISABLE" in environ:
        proteus.overridden("PROTEUS_DISABLE", "KIR_JIT_DISABLE")
        disable = environ["KIR_JIT_DISABLE"] not in ("", "0")
    opt, pipeline, codegen_opt = args.opt, args.pipeline, args.codegen_opt
    if opt is not None or pipeline is not None:
        by = "-O" if opt is not None else "--pipeline"
        proteus.overridden("PROTEUS_OPT_LEVEL", by)
        proteus.overridden("PROTEUS_OPT_PIPELINE", by)
    elif proteus.pipeline is not None:  # Proteus: a pipeline replaces the level
        pipeline = proteus.pipeline
        proteus.overridden("PROTEUS_OPT_LEVEL", "PROTEUS_OPT_PIPELINE")
    else:
        opt = proteus.opt_level
    if codegen_opt is not None:
        proteus.overridden("PROTEUS_CODEGEN_OPT_LEVEL", "--codegen-opt")
    else:
        codegen_opt = proteus.codegen_opt
    if args.no_compile:
        for name in ("PROTEUS_ASYNC_COMPILATION", "PROTEUS_ASYNC_THREADS"):
            proteus.overridden(name, "--no-compile")
    options = jit.Options(opt_level=3 if opt is None else opt, pipeline=pipeline,
                          codegen_opt=codegen_opt, ptx_version=args.ptx_version, features=args.features,
                          kind="ptx" if args.ptx else "cubin", assembler_options=tuple(args.ptxas_option),
                          keep_other_kernels=args.keep_other_kernels, fp_contract=args.fp_contract)
    line = proteus.line()
    if line:
        print(line, file=sys.stderr)
    fd, stats_path = tempfile.mkstemp(prefix="kir-jit-", suffix=".json")
    os.close(fd)
    service = None
    try:
        env = hooked_environment([library("libkir_jit.so")])
        if disable:
            env["KIR_JIT_DISABLE"] = "1"
        elif not args.no_compile:
            from kir.jit.service import start
            try:
                service = start(cache, options, group=environ.get("KIR_CACHE_GROUP") or None, workers=workers,
                                queue=args.queue)
            except KirError as error:  # a refused cache, say: misses run the original
                print(f"kir: jit: {error}; misses run the app's own code", file=sys.stderr)
        if not disable:
            from kir.jit.clients import declare, reference
            try:  # how this run's client keys, for `kir tune --jit-cache` (docs/jit.md, "Declaring a client")
                declare(cache, reference(options, specialize_grid="grid" in specialize,
                                         specialize_block="block" in specialize, bounds=bounds,
                                         launch_bounds=launch_bounds, specialize_args=specialize_args),
                        group=environ.get("KIR_CACHE_GROUP") or None)
            except (KirError, OSError) as error:
                print(f"kir: jit: the client's descriptor is not written: {error}", file=sys.stderr)
        env.update(client_environment(cache, options, all_kernels=args.all,
                                      specialize_grid="grid" in specialize,
                                      specialize_block="block" in specialize,
                                      bounds=bounds, stats=stats_path, launch_bounds=launch_bounds,
                                      specialize_args=specialize_args,
                                      service=service.socket if service else None,
                                      mode=mode, timeout_ms=args.timeout_ms))
        if service is None:
            env.pop("KIR_JIT_SERVICE", None)
        app = run_app_process(command, env)
        stats = read_stats(Path(stats_path))
    finally:
        if service is not None:
            service.stop()
        os.unlink(stats_path)
        if temporary_cache:
            shutil.rmtree(temporary_cache, ignore_errors=True)
    if disable:
        print("kir: jit: disabled (PROTEUS_DISABLE / KIR_JIT_DISABLE): no launch was looked up", file=sys.stderr)
    elif stats is None:
        if app.returncode >= 0:  # killed: finish() says so
            print("kir: jit: the client wrote no counters (the app never loaded the hook, or ended without "
                  "running its exit handlers)", file=sys.stderr)
    else:
        errors = f", {plural(stats['errors'], 'error')} (refused or unreadable: see above)" if stats.get("errors") else ""
        compiled = ""
        if stats.get("service"):
            compiled = (f"{stats['compiled']} compiled ({stats['mode']}, {stats['compile_wait_ms']:.0f} ms waited"
                        f"{', ' + str(stats['compile_failures']) + ' failed' if stats['compile_failures'] else ''}"
                        f"{', ' + str(stats['queue_full']) + ' queue full' if stats['queue_full'] else ''}), ")
        print(f"kir: jit: {plural(stats['launches'], 'launch')} looked up in {stats['cache']}: "
              f"{plural(stats['hits'], 'hit')}, {plural(stats['misses'], 'miss')}, {stats['substituted']} substituted, {compiled}"
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
