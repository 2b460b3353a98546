"""`kir tune RECORD…`: search launch configuration and compile options of recorded
launches with Optuna (replay time, verified output), print the trials and the best
variant against the recorded code, and store the winner the JIT client may use in
its kernel-object cache under the key it computes at the app's launch (kir.tune,
docs/tune.md). Exit 1 when a record has no verified trial."""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from kir.commands.replay_all import ClusterOptions
from kir.envelope import add_json_argument, envelope
from kir.errors import OptionError

SCHEMA = "kir.tune/1"


def add_arguments(parser) -> None:
    parser.add_argument("records", metavar="RECORD", nargs="+",
                        help="a .kirrec file, or a recording directory (kir record -o DIR): all its records")
    parser.add_argument("--trials", type=int, default=20, metavar="N", help="trials per record (default 20)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--space", metavar="FILE", help="the search space, a JSON file (docs/tune.md)")
    where.add_argument("--preset", "--space-preset", default="standard",
                       choices=("compiler", "quick", "standard", "launch", "full"),
                       help="a built-in space (default standard; compiler: compile options only, at the "
                            "recorded launch; launch: the launch configuration only)")
    parser.add_argument("--jit-cache", metavar="DIR",
                        help="store the winner the JIT client may run in this kernel-object cache, under the "
                             "JIT key `kir run --jit-cache DIR` computes at the app's launch")
    parser.add_argument("--store", choices=("better", "always", "never"), default="better",
                        help="store the hand-off only when faster than the recorded code (default), always, "
                             "or never (report only)")
    parser.add_argument("--client-specialize", metavar="grid,block", default="",
                        help="what the JIT client specializes (kir run's KIR_JIT_SPECIALIZE): the hand-off may "
                             "then use code with constant dims or launch bounds")
    parser.add_argument("--client-bounds", metavar="MAXT[,MINB]",
                        help="the launch bounds the JIT client keys on (KIR_JIT_BOUNDS)")
    parser.add_argument("--client", metavar="NAME", action="append", default=[],
                        help="hand off to this client only (repeatable): a client declared in the --jit-cache "
                             "directory (DIR/.jit/clients/NAME.json, docs/jit.md), or `reference` (the one the "
                             "--client-* options describe). Default: the reference client and every declared one")
    verify = parser.add_argument_group("verifying trials with a tolerance (default: the space's, else the "
                                       "record's annotations, else bitwise)")
    verify.add_argument("--atol", type=float, help="absolute tolerance")
    verify.add_argument("--rtol", type=float, help="relative tolerance")
    verify.add_argument("--ulp", type=int, metavar="N", help="at most N units in the last place per element")
    from kir.replay import DTYPES, NORMS
    verify.add_argument("--norm", choices=NORMS, default="linf", help="norm of the difference (default linf)")
    verify.add_argument("--dtype", choices=DTYPES, default="float32",
                        help="element type of the outputs (default float32)")
    parser.add_argument("--seed", type=int, metavar="N", help="the sampler's seed (repeatable searches)")
    parser.add_argument("--device", type=int, default=0, metavar="N", help="the CUDA device (default 0)")
    spread = parser.add_argument_group("across GPUs and nodes (Dask)")
    spread.add_argument("--workers", metavar="N", nargs="?", const="auto",
                        help="Dask worker processes on this machine (auto: one per GPU): records, and each "
                             "record's trials, spread over them")
    spread.add_argument("--scheduler", metavar="ADDRESS", help="run on a running Dask cluster")
    spread.add_argument("--scheduler-file", metavar="FILE", help="the same, named by its scheduler file")
    spread.add_argument("--storage", "--optuna-storage", metavar="URL",
                        help="the Optuna storage the trials are shared through: journal:PATH (a journal file "
                             "on a shared file system), sqlite:///FILE, ... (default: in memory; with "
                             "--workers/--scheduler, journal:kir-tune.journal). A study continues where an "
                             "earlier run with the same storage stopped")
    parser.add_argument("--resume", action="store_true",
                        help="continue the record's study in --storage even when it was run with another space "
                             "or executor (default: start a new study then, with a warning)")
    search = parser.add_argument_group("search control (Mneme's `mneme tune` options, docs/tune.md)")
    search.add_argument("--sampler", default="tpe", choices=("tpe", "random", "grid", "exhaustive", "cmaes"),
                        help="Optuna's sampler (default tpe); grid: --trials points of the grid of every choice; "
                             "exhaustive: every point of it (--trials ignored); cmaes: CMA-ES (the cmaes package)")
    search.add_argument("--metric", default="median", choices=("median", "mean", "min", "max"),
                        help="the statistic of a trial's timed rounds it is ranked by (default median)")
    search.add_argument("--objective", default="time", choices=("time", "speedup"),
                        help="minimize the time, or maximize the recorded code's time over it (default time)")
    search.add_argument("--timeout", type=float, metavar="SECONDS", help="start no trial after this many seconds")
    search.add_argument("--trial-timeout", type=float, metavar="SECONDS",
                        help="kill a trial that runs longer (its result: an error of kind timeout)")
    search.add_argument("--fail-fast", action="store_true", default=False,
                        help="stop a record's study at its first trial that fails to compile, load or launch")
    search.add_argument("--keep-going", dest="fail_fast", action="store_false",
                        help="go on after such trials (the default)")
    search.add_argument("--iterations", type=int, metavar="N", help="timed launches per round (the space's repeat)")
    search.add_argument("--warmup", type=int, metavar="N", help="untimed launches first (the space's warmup)")
    search.add_argument("--study-name", metavar="NAME", default="kir-tune",
                        help="the studies' name prefix: NAME-<static hash>-<launch identity> (default kir-tune)")
    mode = parser.add_argument_group("run mode")
    mode.add_argument("--print-space", action="store_true",
                      help="print each record's search space as resolved (JSON) and exit; no GPU")
    mode.add_argument("--dry-run", action="store_true",
                      help="print each record's space and first trial (the recorded launch, default options) "
                           "and exit; no trial runs")
    mode.add_argument("--baseline-only", action="store_true", help="measure the recorded code only; no trial")
    mode.add_argument("--config", metavar="FILE",
                      help="a JSON (or, ending in .yaml/.yml, YAML) object of these options (kir.tune-config/1; "
                           "--dump-config writes one): options given on the command line win")
    mode.add_argument("--dump-config", metavar="FILE",
                      help="write the options as resolved to FILE (YAML when it ends in .yaml/.yml, else JSON) "
                           "and exit")
    space = parser.add_argument_group("space controls (override the preset or --space file)")
    space.add_argument("--launch-dim", choices=("none", "auto", "x", "xy", "xyz"),
                       help="none: the recorded block only; auto: auto blocks on the axes the launch uses; "
                            "x, xy, xyz: auto blocks varying exactly these axes")
    space.add_argument("--adaptive-invalid-ban", action=argparse.BooleanOptionalAction, default=True,
                       help="skip, in later samples, a block whose launch failed in a trial (default on, as "
                            "Mneme's); the skipped samples are not trials, and are counted in the report")
    space.add_argument("--launch-safety", choices=("conservative", "balanced", "aggressive"),
                       help="the thread budget of auto blocks")
    space.add_argument("--passes", nargs="+", metavar="PIPELINE",
                       help="candidate LLVM pipelines (new pass manager texts, e.g. 'default<O2>' or "
                            "'function(instcombine,gvn)'; kir.jit.pipeline.PASSES lists the passes)")
    space.add_argument("--fixed-passes", metavar="PIPELINE", help="one pipeline for every trial")
    space.add_argument("--pipeline-file", metavar="FILE", help="candidate pipelines, one a line (# comments)")
    space.add_argument("--codegen-opt-range", metavar="LOW:HIGH[:STEP]", help="the back end's levels searched")
    space.add_argument("--fixed-codegen-opt", type=int, metavar="N", help="one back-end level for every trial")
    space.add_argument("--fixed-fp-contract", choices=("auto", "fast", "on", "off"),
                       help="one floating-point contraction for every trial (the compiler/full presets search it)")
    for flag, key in (("--specialize-space", "specialize_args"), ("--specialize-dims-space", "specialize_dims"),
                      ("--launch-bounds-space", "launch_bounds")):
        space.add_argument(flag, choices=("fixed", "on", "off", "on-off"),
                           help=f"{key}: the space's own (fixed), on, off, or searched (on-off)")
    space.add_argument("--min-blocks-per-sm-range", metavar="LOW:HIGH[:STEP]",
                       help="the launch bounds' min blocks per SM searched")
    space.add_argument("--fixed-min-blocks-per-sm", type=int, metavar="N", help="one min blocks per SM")
    space.add_argument("--max-threads-range", metavar="LOW:HIGH[:STEP]",
                       help="the launch bounds' max threads searched (1..1024; a bound below a trial's block is "
                            "skipped as invalid, never compiled)")
    space.add_argument("--max-threads-policy", choices=("block-threads", "recorded", "hardware", "powers-of-two"),
                       help="the launch bounds' max threads without --max-threads-range: the block's threads "
                            "(default), the recorded block's, 1024, or searched among 64..1024")
    custom = parser.add_argument_group("a search-space module (Mneme's plugin protocol, docs/tune.md)")
    custom.add_argument("--space-module", metavar="MODULE_OR_PATH:CLASS",
                        help="the space's dimensions, the variant of each sample, its constraints and first trial "
                             "from CLASS (kir.tune.space's docstring); warmup, repeat, timing and tolerance stay "
                             "the preset's or --space file's")
    custom.add_argument("--space-arg", metavar="KEY=VALUE", action="append", default=[],
                        help="an argument of CLASS(record, KEY=VALUE, ...) (repeatable; VALUE read as JSON, else "
                             "as text)")
    parser.add_argument("--executor", metavar="MODULE:FUNCTION",
                        help="run each trial as FUNCTION(path, point) instead of replaying it (tests)")
    add_json_argument(parser, help=f"print one JSON object ({SCHEMA})")
    parser.add_argument("--results-dir", metavar="DIR",
                        help="also write the results to DIR (Mneme's --results-dir): per record the trials "
                             "(trials.jsonl, trials.csv), best.json, baseline.json, search_space.json, plots "
                             "(history.png, importances.png); summary.json/.csv, speedup.png and index.html over "
                             "the records (docs/tune.md)")
    from kir.progress import add_argument as add_progress_argument
    add_progress_argument(parser)


def record_paths(items: list[str]) -> list[str]:
    from kir.record import Recording
    paths = []
    for item in items:
        if Path(item).is_dir():
            found = Recording(item).record_paths
            if not found:
                raise OptionError(f"{item}: no records to tune (records/ holds no .kirrec file)")
            paths += [str(p) for p in found]
        else:
            paths.append(item)
    return paths


def client_of(args: argparse.Namespace):
    from kir.jit import Specialization
    from kir.tune import Client
    dims = {d.strip() for d in args.client_specialize.split(",") if d.strip()}
    unknown = dims - {"grid", "block"}
    if unknown:
        raise OptionError(f"--client-specialize {args.client_specialize!r}: expected grid, block or grid,block")
    from kir.jit.values import parse_bounds
    bounds = Specialization(bounds=parse_bounds(args.client_bounds, "--client-bounds")).bounds \
        if args.client_bounds else None
    return Client("grid" in dims, "block" in dims, bounds)


def clients_of(args: argparse.Namespace) -> list:
    """The clients the hand-off is for: the reference client of the --client-* options and
    every client declared in the --jit-cache directory (kir.jit.clients), or those --client names."""
    from kir.tune import Client
    reference = client_of(args)
    declared = []
    if args.jit_cache:
        from kir.jit.clients import declared as read_declared
        found, warnings = read_declared(args.jit_cache)
        for warning in warnings:
            print(f"kir: warning: {warning}", file=sys.stderr)
        declared = [Client.from_descriptor(d) for d in found]
    if not args.client:
        return [reference, *declared]
    by_name = {"reference": reference, **{c.name: c for c in declared}}
    unknown = [n for n in args.client if n not in by_name]
    if unknown:
        where = f"{args.jit_cache}/.jit/clients" if args.jit_cache else "no --jit-cache"
        raise OptionError(f"--client {unknown[0]}: not declared ({where}; declared: "
                          f"{', '.join(sorted(by_name))})")
    return [by_name[n] for n in dict.fromkeys(args.client)]


CONFIG_SCHEMA = "kir.tune-config/1"
#: what --config/--dump-config leave out (run modes, not options)
NOT_CONFIG = ("records", "config", "dump_config", "print_space", "dry_run", "func", "command")


def parse_range(text: str, flag: str, low: int, high: int) -> list[int]:
    """LOW:HIGH[:STEP], both ends included (Mneme's builtin_spaces.parse_range)."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError
        a, b, step = int(parts[0]), int(parts[1]), int(parts[2]) if len(parts) == 3 else 1
    except ValueError:
        raise OptionError(f"{flag} {text!r}: expected LOW:HIGH[:STEP] (integers)") from None
    if step < 1 or a > b or a < low or b > high:
        raise OptionError(f"{flag} {text!r}: expected {low} <= LOW <= HIGH <= {high} and STEP >= 1")
    return list(range(a, b + 1, step))


def _defaults() -> dict:
    """`kir tune`'s own options and their defaults (not the top-level parser's)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return vars(parser.parse_args(["-"]))


def load_config(path: str):
    """--config FILE: JSON, or YAML when FILE ends in .yaml or .yml (Mneme's
    session.py _load_config_file reads both; PyYAML comes with Optuna, the tune extra)."""
    from kir.files import MAX_JSON_BYTES, load_json, read_file
    where = f"--config {path}"
    if not str(path).lower().endswith((".yaml", ".yml")):
        return load_json(path, where)
    yaml = _yaml()
    data = read_file(path, where, MAX_JSON_BYTES, OptionError)
    try:
        return yaml.safe_load(data.decode())
    except UnicodeDecodeError as error:
        raise OptionError(f"{where}: byte {error.start}: not UTF-8") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1} (byte {len(data.decode()[:mark.index].encode())}): " \
            if mark is not None else ""
        raise OptionError(f"{where}: {at}not YAML: {getattr(error, 'problem', None) or error}") from None


def _yaml():
    try:
        import yaml
    except ImportError as error:
        from kir.errors import missing_extra
        raise missing_extra("pyyaml", "tune", "kir tune --config FILE.yaml", error) from None
    return yaml


def dump_config(args: argparse.Namespace) -> None:
    """--dump-config FILE: JSON, or YAML by FILE's extension (.yaml, .yml)."""
    path, data = Path(args.dump_config), config_of(args)
    if path.suffix.lower() in (".yaml", ".yml"):
        path.write_text(_yaml().safe_dump(data, sort_keys=False))
    else:
        path.write_text(json.dumps(data, indent=2) + "\n")


def apply_config(args: argparse.Namespace) -> None:
    """--config FILE: its options where the command line left the default."""
    if not args.config:
        return
    data = load_config(args.config)
    if not isinstance(data, dict) or data.get("schema", CONFIG_SCHEMA) != CONFIG_SCHEMA:
        raise OptionError(f"--config {args.config}: expected an object of options, schema {CONFIG_SCHEMA}")
    defaults = _defaults()
    given = _given()
    for key, value in data.items():
        if key == "schema":
            continue
        if key not in defaults or key in NOT_CONFIG:
            raise OptionError(f"--config {args.config}: unknown option {key!r}")
        if key not in given and getattr(args, key) == defaults[key]:
            setattr(args, key, _config_value(args.config, key, value, defaults[key]))


def _action(key: str) -> argparse.Action:
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    return next(a for a in parser._actions if a.dest == key)  # argparse keeps no public list of them


def _config_value(path: str, key: str, value, default):
    """`value` of option `key` in a --config file, checked as the command line would take
    it (a YAML date or a JSON string where a number goes is one line, exit 2)."""
    action = _action(key)
    if value is None and default is None:
        return value
    if action.nargs == 0:  # store_true / store_false / --x/--no-x
        ok, expected = isinstance(value, bool), "true or false"
    elif action.nargs in ("+", "*") or isinstance(action.default, list):  # nargs lists, append
        ok, expected = isinstance(value, list) and all(isinstance(v, str) for v in value), "a list of strings"
    elif action.type in (int, float):
        ok = isinstance(value, (int, float) if action.type is float else int) and not isinstance(value, bool)
        expected = "a number" if action.type is float else "an integer"
    else:
        ok, expected = isinstance(value, str), "a string"
    if ok and action.choices is not None and value not in action.choices:
        ok, expected = False, "one of " + ", ".join(map(str, action.choices))
    if not ok:
        raise OptionError(f"--config {path}: {key} {value!r}: expected {expected}")
    return value


def _given() -> set[str]:
    """The options this process's command line names (even at their default value)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    unset = object()  # argparse sets a default only where the namespace has no value yet
    known, _ = parser.parse_known_args(sys.argv[1:], namespace=argparse.Namespace(**dict.fromkeys(_defaults(), unset)))
    return {name for name, value in vars(known).items() if value is not unset} - {"records"}


def config_of(args: argparse.Namespace) -> dict:
    own = _defaults()
    return envelope(CONFIG_SCHEMA, **{k: v for k, v in sorted(vars(args).items()) if k in own and k not in NOT_CONFIG})


def space_of(args: argparse.Namespace):
    """The preset or --space file, with the space controls applied."""
    from kir.files import load_json
    from kir.tune import Space
    if args.space:
        data, where = load_json(args.space, f"--space {args.space}"), str(args.space)
        if not isinstance(data, dict):
            return Space.from_dict(data, where)  # its error
    else:
        data, where = {"preset": args.preset}, f"preset {args.preset}"
    data = dict(data)
    changed = []

    def put(key, value, flag):
        data[key] = value
        changed.append(flag)
    if args.launch_dim:
        put("block", "recorded" if args.launch_dim == "none" else "auto", "--launch-dim")
        if args.launch_dim != "none":
            put("launch_dim", args.launch_dim, "--launch-dim")
    if args.launch_safety:
        put("launch_safety", args.launch_safety, "--launch-safety")
    pipelines = []
    if args.passes:
        pipelines += args.passes
    if args.pipeline_file:
        from kir.files import MAX_JSON_BYTES, read_file
        where = f"--pipeline-file {args.pipeline_file}"
        try:
            text = read_file(args.pipeline_file, where, MAX_JSON_BYTES, OptionError).decode()
        except UnicodeDecodeError as error:
            raise OptionError(f"{where}: not UTF-8 text at byte {error.start}") from None
        pipelines += [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if not pipelines:
            raise OptionError(f"--pipeline-file {args.pipeline_file}: no pipeline in it")
    if args.fixed_passes:
        if pipelines:
            raise OptionError("--fixed-passes: not with --passes or --pipeline-file")
        pipelines = [args.fixed_passes]
    if pipelines:
        put("pipeline", pipelines, "--passes")
    if args.codegen_opt_range and args.fixed_codegen_opt is not None:
        raise OptionError("--fixed-codegen-opt: not with --codegen-opt-range")
    if args.codegen_opt_range:
        put("codegen_opt", parse_range(args.codegen_opt_range, "--codegen-opt-range", 0, 3), "--codegen-opt-range")
    if args.fixed_codegen_opt is not None:
        put("codegen_opt", [args.fixed_codegen_opt], "--fixed-codegen-opt")
    if args.fixed_fp_contract is not None:
        put("fp_contract", [args.fixed_fp_contract], "--fixed-fp-contract")
    for flag, key in (("specialize_space", "specialize_args"), ("specialize_dims_space", "specialize_dims"),
                      ("launch_bounds_space", "launch_bounds")):
        mode = getattr(args, flag)
        if mode and mode != "fixed":
            put(key, {"on": [True], "off": [False], "on-off": [False, True]}[mode], "--" + flag.replace("_", "-"))
    if args.min_blocks_per_sm_range and args.fixed_min_blocks_per_sm is not None:
        raise OptionError("--fixed-min-blocks-per-sm: not with --min-blocks-per-sm-range")
    if args.min_blocks_per_sm_range:
        put("min_blocks", parse_range(args.min_blocks_per_sm_range, "--min-blocks-per-sm-range", 0, 32),
            "--min-blocks-per-sm-range")
    if args.fixed_min_blocks_per_sm is not None:
        put("min_blocks", [args.fixed_min_blocks_per_sm], "--fixed-min-blocks-per-sm")
    if args.max_threads_range:
        put("max_threads", parse_range(args.max_threads_range, "--max-threads-range", 1, 1024), "--max-threads-range")
    if args.max_threads_policy:
        put("max_threads_policy", args.max_threads_policy, "--max-threads-policy")
    if args.space_module:
        put("module", space_module(args.space_module), "--space-module")
        put("module_args", space_args(args.space_arg), "--space-arg")
    elif args.space_arg:
        raise OptionError("--space-arg: only with --space-module")
    for flag in ("iterations", "warmup"):
        if getattr(args, flag) is not None:
            put("repeat" if flag == "iterations" else "warmup", getattr(args, flag), "--" + flag)
    return Space.from_dict(data, where + (" with " + ", ".join(dict.fromkeys(changed)) if changed else ""))


def space_module(spec: str) -> str:
    """--space-module MODULE_OR_PATH:CLASS, checked here (a bad one is exit 2 before any
    trial), a path made absolute (the workers import it too)."""
    from kir.tune.space import load_space_class
    load_space_class(spec)
    module, _, name = spec.rpartition(":")
    if module.endswith(".py") or "/" in module:
        return f"{Path(module).resolve()}:{name}"
    return spec


def space_args(items: list[str]) -> dict:
    """--space-arg KEY=VALUE…: VALUE as JSON, else as text (Mneme's parse_key_value_args)."""
    out = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise OptionError(f"--space-arg {item!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


@dataclass(frozen=True)
class TuneOptions:
    """`kir tune`'s options, read from the command line once (`from_args`, checked there)."""
    paths: tuple[str, ...]            #: the records (a directory's expanded)
    space: object                     #: a kir.tune.Space
    trials: int = 20
    client: object = None             #: the kir.tune.Clients the hand-off is for
    jit_cache: str | None = None
    store: str = "better"
    seed: int | None = None
    device: int = 0
    cluster: ClusterOptions = ClusterOptions()
    storage: str | None = None        #: journal:kir-tune.journal on a cluster unless given
    executor: str | None = None
    json: bool = False
    resume: bool = False
    sampler: str = "tpe"
    metric: str = "median"
    objective: str = "time"
    timeout: float | None = None
    fail_fast: bool = False
    study_prefix: str = "kir-tune"
    baseline_only: bool = False
    trial_timeout: float | None = None
    results_dir: str | None = None
    adaptive_invalid_ban: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> TuneOptions:
        if args.trials < 1:
            raise OptionError(f"--trials {args.trials}: expected a positive number")
        for flag in ("timeout", "trial_timeout"):
            value = getattr(args, flag)
            if value is not None and not value > 0:
                raise OptionError(f"--{flag.replace('_', '-')} {value}: expected a positive number of seconds")
        space = space_of(args)
        from kir.replay import Tolerance
        tolerance = Tolerance.of(args.atol, args.rtol, args.ulp, args.norm, args.dtype)
        if tolerance is not None:  # the command line's overrides the space's
            space.tolerance = tolerance.to_json()
        paths = tuple(record_paths(args.records))
        client = clients_of(args)
        cluster = ClusterOptions.from_args(args)
        storage = "journal:kir-tune.journal" if cluster.asked and args.storage is None else args.storage
        return cls(paths=paths, space=space, trials=args.trials, client=client, jit_cache=args.jit_cache,
                   store=args.store, seed=args.seed, device=args.device, cluster=cluster, storage=storage,
                   executor=args.executor, json=args.json, resume=args.resume, sampler=args.sampler,
                   metric=args.metric, objective=args.objective, timeout=args.timeout, fail_fast=args.fail_fast,
                   study_prefix=args.study_name, baseline_only=args.baseline_only,
                   trial_timeout=args.trial_timeout, results_dir=args.results_dir,
                   adaptive_invalid_ban=args.adaptive_invalid_ban)


def run(args: argparse.Namespace) -> int:
    from kir.record import Record
    from kir.tune import tune
    apply_config(args)
    opts = TuneOptions.from_args(args)
    if args.dump_config:
        dump_config(args)
        return 0
    records = [Record.load(path) for path in opts.paths]  # a bad record is exit 2 before any trial runs
    if args.print_space or args.dry_run:
        return print_spaces(opts, records, args.dry_run)
    from kir.tune.study import check_storage
    check_storage(opts.storage)  # a bad --storage is its one line, before anything is said
    if any(opts.space.for_device(record).timing == "activity" for record in records):  # HIP records: "each"
        from kir.replay.activity import cupti
        cupti("kir tune (the space's timing activity)")  # not installed: the install hint before any trial
    if opts.results_dir:
        from kir.tune.results import make_results_dir
        make_results_dir(opts.results_dir)  # a folder that cannot be written: said before the first trial
    for path, record in zip(opts.paths, records):
        if record.kernel.ir is None and not opts.baseline_only:
            print(f"kir tune: {path}: {record.kernel.name} has no LLVM IR (an nvcc build): tuning its launch "
                  "configuration only, with the recorded code; the blocks found are suggestions for the source, "
                  "never handed to the JIT client", file=sys.stderr, flush=True)
    cluster = opts.cluster.open()
    try:
        from kir.progress import Progress
        with Progress("tuning: trial", total=len(opts.paths) * opts.trials) as progress:
            progress.update(0)
            results = tune(list(opts.paths), opts.space, opts.trials, storage=opts.storage, cluster=cluster,
                           seed=opts.seed, executor=opts.executor, client=opts.client, cache=opts.jit_cache,
                           store=opts.store, device=opts.device, progress=progress.callback,
                           resume=opts.resume, sampler=opts.sampler, metric=opts.metric, objective=opts.objective,
                           timeout=opts.timeout, fail_fast=opts.fail_fast, study_prefix=opts.study_prefix,
                           baseline_only=opts.baseline_only, trial_timeout=opts.trial_timeout,
                           adaptive_invalid_ban=opts.adaptive_invalid_ban)
    finally:
        if cluster is not None:
            cluster.close()
    for r in results:
        for warning in r.warnings:
            print(f"kir: warning: {r.outcome.path}: {warning}", file=sys.stderr)
    status = 1 if any(r.outcome.best() is None for r in results) else 0
    if opts.results_dir:
        from kir.tune.results import write_results
        write_results(results, opts.results_dir, config=config_of(args))
    if opts.json:
        print(json.dumps(envelope(SCHEMA, trials=opts.trials, storage=opts.storage,
                          jit_cache=opts.jit_cache, store=opts.store,
                          records=[r.to_json() for r in results],
                          conflicts=[h.conflict | {"record": r.outcome.path, "client": h.client}
                                     for r in results for h in r.handoffs if h.conflict is not None],
                          exit_status=status)))
    else:
        for r in results:
            print_record(r, opts.jit_cache)
    return status


def print_spaces(opts: TuneOptions, records, dry_run: bool) -> int:
    """--print-space / --dry-run: each record's space as resolved (and, dry, the first
    trial and the sampler's plan), as one JSON object (kir.tune-space-report/1)."""
    from kir.tune.study import study_name
    out = []
    for path, record in zip(opts.paths, records):
        space = opts.space.for_device(record)
        space = space.launch_only() if record.kernel.ir is None else space
        entry = {"record": path, "kernel": record.kernel.name, "study": study_name(record, opts.study_prefix),
                 "launch_only": record.kernel.ir is None, "space": space.describe(record)}
        if dry_run:
            first = space.baseline_params(record)
            entry |= {"sampler": opts.sampler, "metric": opts.metric, "objective": opts.objective,
                      "trials": 0 if opts.baseline_only else opts.trials, "first_trial": first,
                      "grid": space.grid(record)}
        out.append(entry)
    print(json.dumps(envelope("kir.tune-space-report/1", dry_run=dry_run, records=out), indent=None if opts.json
                     else 2))
    return 0


def cell(value, fmt="{}") -> str:
    return "-" if value is None else fmt.format(value)


def print_record(r, cache) -> None:
    from kir.tune.study import speedup, throughput
    o = r.outcome
    print(f"{Path(o.path).name}: {o.record.kernel.demangled or o.record.kernel.name} on {o.arch or '?'}")
    rec = o.recorded
    if rec.get("median_ms") is not None:
        print(f"  recorded code: {rec['median_ms']:.4f} ms per launch ({rec.get('registers') or '?'} registers), "
              f"{'verified' if rec.get('verified') else 'NOT verified'}")
    else:
        print(f"  recorded code: not measured ({rec.get('error') or 'no result'})")
    header = ("#", "state", "ms", "speedup", "regs", "spills", "compile s", "variant")
    table = [header]
    for row in o.rows:
        res = row.result
        state = row.state if row.state != "pruned" else (res.get("status") or "pruned")
        spills = None if res.get("spill_stores") is None else (res.get("spill_stores") or 0) + \
            (res.get("spill_loads") or 0)
        table.append((str(row.number), state, cell(res.get("median_ms"), "{:.4f}"),
                      cell(speedup(o.recorded_ms, row.ms), "{:.2f}x"), cell(res.get("registers")), cell(spills),
                      cell(res.get("compile_seconds"), "{:.2f}"),
                      (row.point.describe() if row.point else "-") + (f"  [{res['error']}]" if res.get("error")
                                                                      else "")))
    widths = [max(len(line[c]) for line in table) for c in range(len(header) - 1)]
    for line in table:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(line, widths)) + "  " + line[-1])
    if o.skipped:
        counts = {k: sum(r.skipped == k for r in o.skipped) for k in ("banned", "invalid")}
        banned = ", ".join("x".join(map(str, b)) for b in o.banned_blocks)
        print(f"  skipped samples (not run): {counts['banned']} of banned blocks" + (f" ({banned})" if banned else "")
              + f", {counts['invalid']} invalid")
    best = o.best()
    if best is None:
        print("  no verified trial")
    else:
        note = "" if best.point.recorded_launch else \
            "  (another launch configuration: a suggestion for the source, never applied by the JIT client)"
        print(f"  best: trial {best.number}, {best.ms:.4f} ms ({cell(speedup(o.recorded_ms, best.ms), '{:.2f}x')} "
              f"the recorded code): {best.point.describe()}{note}")
    rate = throughput(o.rows)
    if rate["trials_per_minute"] is not None:
        print(f"  throughput: {rate['trials_per_minute']:.1f} trials/min; per trial {rate['mean_wall_s']:.3f} s = "
              f"compile {rate['mean_compile_s']:.3f} + run {rate['mean_run_s']:.3f} + overhead "
              f"{rate['mean_overhead_s']:.3f} s")
    for h in r.handoffs:
        who = "the JIT client" if h.client == "reference" else f"client {h.client}"
        if h.row is None:
            print(f"  hand-off to {who}: none ({h.reason})")
            continue
        where = f"stored in {cache} under {h.key}" if h.stored else f"not stored: {h.reason} (key {h.key})"
        print(f"  hand-off to {who}: trial {h.row.number}, {h.row.ms:.4f} ms "
              f"({cell(speedup(o.recorded_ms, h.row.ms), '{:.2f}x')}): {h.row.point.describe()}; {where}")
        if h.conflict is not None:
            c = h.conflict
            print(f"  conflict: key {c['key']} also tuned by {c['other_record']} ({c['other_ms']:.4f} ms): kept "
                  f"{'this record' if c['kept'] == 'this' else 'that one'}")
    sys.stdout.flush()


__all__ = ["add_arguments", "cell", "client_of", "clients_of", "print_record", "record_paths", "run", "SCHEMA", "TuneOptions"]
