"""What `kir tune` searches: a recorded launch's configuration and its compile options
(issue 13 §2), as Optuna dimensions.

A space is a JSON object (`kir tune --space FILE`), or one of the presets
(`--preset`), each key a list of choices or a single fixed value:

    {"schema": "kir.tune-space/1",
     "preset": "standard",                  # start from a preset, then override keys
     "block": "auto",                       # "auto", "recorded", or [[256,1,1], [128,1,1], ...]
     "launch_safety": "balanced",           # with "auto": conservative | balanced | aggressive
     "launch_dim": "auto",                  # with "auto": the axes whose size varies: auto | x | xy | xyz
     "opt_level": [1, 2, 3],                # LLVM's default<ON> pipeline
     "pipeline": ["default<O3>", ...],      # explicit pipelines instead of opt_level (optional)
     "codegen_opt": [2, 3],                 # the back end's level
     "maxrregcount": [0, 64, 128],          # ptxas --maxrregcount (0: none)
     "fp_contract": ["auto", "fast", "off"],  # floating-point contraction (kir.jit.Options.fp_contract)
     "specialize_args": [true],             # the record's runtime-constant arguments (kernel.jit_args)
     "specialize_dims": [false, true],      # grid and block become constants
     "launch_bounds": [false, true],        # __launch_bounds__(threads of the block, min_blocks)
     "min_blocks": [0, 1, 2, 4],            # with launch_bounds
     "max_threads": [256, 512],             # with launch_bounds: its max threads (default: the policy's)
     "max_threads_policy": "block-threads", # without max_threads: block-threads | recorded | hardware |
                                            # powers-of-two
     "timing": "graph",                     # how launches are timed (kir.replay.Variant.timing:
                                            # each, graph, or activity: CUPTI's kernel-only times)
     "tolerance": {"ulp": 4, "dtype": "float32"},  # verification (kir.replay.Tolerance; default:
                                            # the record's annotations, else bitwise)
     "warmup": 1, "repeat": 20}             # per trial: untimed, then timed launches (fixed)

The dimensions follow Mneme's tuner (python/mneme/tuning/builtin_spaces.py,
BuiltinTuneSearchSpace: block shapes whose grid is derived from the recorded work,
pipelines default<O3>…, codegen opt, specialize on/off, specialize dims, launch
bounds with min blocks per SM), with kir.jit's option names. "auto" blocks are
Mneme's candidates in spirit: on each axis the launch uses (block or grid > 1),
powers of two and the recorded size; the total at most the thread budget
(conservative: the recorded block's threads, balanced: twice that, aggressive:
1024) and at least a warp; the grid on each such axis covers the recorded work
(ceil(recorded block × grid / block)), the others keep the recorded grid.
"launch_dim" picks the axes instead (Mneme's `--launch-dim`, builtin_spaces.py
_active_axes): "x", "xy" or "xyz" vary exactly those axes, one the launch does not
use included, and keep the others at the recorded size; "auto" the axes the launch
uses.

`Space.sample(trial, record)` turns an Optuna trial's choices into a `Point`, and
`Point.variant()` into the kir.replay.Variant that runs it.

A space may instead come from a **search-space module** (`"module":
"MODULE_OR_PATH:CLASS"`, `"module_args": {...}`; `kir tune --space-module`,
`--space-arg`), Mneme's plugin protocol (python/mneme/tuning/builtin_spaces.py
load_custom_space, search_space.py SearchSpace) with kir's names:

    class MySpace:
        def __init__(self, record, **module_args): ...   # a kir.record.Record
        def dimensions(self):        # {name: [choices] | value | Mneme-style param}
        def derived(self, params):   # {Point field: value}: block, grid, opt_level, pipeline,
                                     # codegen_opt, maxrregcount, fp_contract, specialize_args,
                                     # specialize_dims, launch_bounds, min_blocks, max_threads
        def constraints(self, params):  # optional: False skips the sample as invalid
        def baseline(self):          # optional: the first trial's params (default: each
                                     # dimension's first choice)

A dimension is a list of choices, one value (fixed), or an object as Mneme's params
are (`.value`: fixed; `.choices`: categorical or bool; `.low`, `.high`, `.step`: an
integer range). The block defaults to the recorded one, the grid to the one covering
the recorded work, the rest to kir.jit's defaults; warmup, repeat, timing and
tolerance stay the space's.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

from kir.errors import OptionError

__all__ = ["PRESETS", "SCHEMA", "Point", "Space", "block_candidates", "derived_grid"]

SCHEMA = "kir.tune-space/1"
MAX_THREADS = 1024
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = ((1 << 31) - 1, 65535, 65535)
SAFETIES = ("conservative", "balanced", "aggressive")
#: the launch bounds' max threads without "max_threads" choices (Mneme's --max-threads-policy,
#: builtin_spaces.py BuiltinTuneSearchSpace._max_threads): the block's threads, the recorded
#: block's, the hardware's 1024, or searched among 64..1024
MAX_THREADS_POLICIES = ("block-threads", "recorded", "hardware", "powers-of-two")
#: the axes "auto" blocks vary (Mneme's --launch-dim; "none" is block "recorded")
LAUNCH_DIMS = ("auto", "x", "xy", "xyz")

#: every key a space may set, with its preset-free default
DEFAULTS = {
    "block": "recorded",
    "launch_safety": "balanced",
    "launch_dim": "auto",
    "opt_level": [3],
    "pipeline": None,
    "codegen_opt": [3],
    "maxrregcount": [0],
    "fp_contract": ["auto"],
    "specialize_args": [True],
    "specialize_dims": [False],
    "launch_bounds": [False],
    "min_blocks": [0],
    "max_threads": None,
    "max_threads_policy": "block-threads",
    "timing": "graph",
    "tolerance": None,
    "warmup": 1,
    "repeat": 20,
    "module": None,
    "module_args": None,
}

PRESETS = {
    # the compile options only, at the recorded launch: all of it can be handed to the JIT
    "compiler": {"block": "recorded", "opt_level": [1, 2, 3], "codegen_opt": [1, 2, 3],
                 "maxrregcount": [0, 64, 128], "fp_contract": ["auto", "fast", "off"],
                 "specialize_args": [False, True]},
    "quick": {"block": "auto", "launch_safety": "conservative", "opt_level": [2, 3], "codegen_opt": [2, 3]},
    # the launch configuration only, kir.jit's default options (Mneme's "launch" preset)
    "launch": {"block": "auto", "launch_safety": "aggressive"},
    "standard": {"block": "auto", "opt_level": [1, 2, 3], "codegen_opt": [1, 2, 3],
                 "maxrregcount": [0, 64, 128], "specialize_args": [False, True]},
    "full": {"block": "auto", "launch_safety": "aggressive", "opt_level": [0, 1, 2, 3], "codegen_opt": [1, 2, 3],
             "maxrregcount": [0, 32, 64, 128, 255], "fp_contract": ["auto", "fast", "on", "off"],
             "specialize_args": [False, True],
             "specialize_dims": [False, True], "launch_bounds": [False, True], "min_blocks": [0, 1, 2, 4, 8]},
}

#: the dimensions Optuna chooses (the others are settings)
DIMENSIONS = ("block", "opt_level", "pipeline", "codegen_opt", "maxrregcount", "fp_contract", "specialize_args",
              "specialize_dims", "launch_bounds", "min_blocks", "max_threads")


def _dims3(value, where: str) -> tuple[int, int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 3 or \
            any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        raise OptionError(f"{where}: {value!r}: expected three integers [x, y, z]")
    return tuple(value)


def derived_grid(recorded_block, recorded_grid, block) -> tuple[int, int, int]:
    """The grid that covers the recorded work with `block` on each axis the launch
    uses (block or grid larger than 1); the recorded grid on the others."""
    out = []
    for b0, g0, b in zip(recorded_block, recorded_grid, block):
        out.append(-(-(b0 * g0) // b) if (b0 > 1 or g0 > 1) else g0)
    return tuple(out)


def active_axes(recorded_block, recorded_grid, launch_dim: str = "auto") -> tuple[bool, bool, bool]:
    """The axes whose block size varies (Mneme's builtin_spaces.py _active_axes): "x",
    "xy", "xyz" those; "auto" each axis the launch uses (block or grid larger than 1)."""
    if launch_dim not in LAUNCH_DIMS:
        raise OptionError(f"launch_dim {launch_dim!r}: expected {', '.join(LAUNCH_DIMS)}")
    if launch_dim == "auto":
        return tuple(b > 1 or g > 1 for b, g in zip(recorded_block, recorded_grid))
    return tuple(axis in launch_dim for axis in "xyz")


def block_candidates(recorded_block, recorded_grid, safety: str = "balanced",
                     launch_dim: str = "auto") -> list[tuple[int, int, int]]:
    """The "auto" block shapes of a launch (see the module's docstring), the recorded one
    first; `launch_dim`: the axes that vary (active_axes)."""
    if safety not in SAFETIES:
        raise OptionError(f"launch_safety {safety!r}: expected {', '.join(SAFETIES)}")
    recorded = tuple(recorded_block)
    threads = math.prod(recorded)
    budget = {"conservative": min(MAX_THREADS, threads), "balanced": min(MAX_THREADS, 2 * threads),
              "aggressive": MAX_THREADS}[safety]
    axes = []
    for i, (b, active) in enumerate(zip(recorded, active_axes(recorded, recorded_grid, launch_dim))):
        if active:
            values = {b} | {1 << k for k in range(11) if (1 << k) <= MAX_BLOCK[i]}
            axes.append(sorted(values))
        else:
            axes.append([b])
    shapes = [recorded]
    for x in axes[0]:
        for y in axes[1]:
            for z in axes[2]:
                shape = (x, y, z)
                n = x * y * z
                if shape == recorded or n > budget or n < min(32, threads):
                    continue
                grid = derived_grid(recorded, recorded_grid, shape)
                if any(not 1 <= g <= limit for g, limit in zip(grid, MAX_GRID)):
                    continue
                shapes.append(shape)
    return shapes


@dataclass
class Point:
    """One trial's choices, resolved against the record: JSON-ready (`asdict`)."""
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    opt_level: int = 3
    pipeline: str | None = None
    codegen_opt: int = 3
    maxrregcount: int = 0
    specialize_args: bool = True
    specialize_dims: bool = False
    launch_bounds: bool = False
    min_blocks: int = 0
    max_threads: int = 0           #: with launch_bounds: its max threads per block (0: the block's threads)
    fp_contract: str = "auto"
    warmup: int = 1
    repeat: int = 20
    timing: str = "graph"
    recorded_launch: bool = True   #: block and grid are the recording's
    recorded_code: bool = False    #: the record's own code (no LLVM IR to compile: an nvcc build)
    tolerance: dict | None = None  #: kir.replay.Tolerance.to_json(); None: the record's annotations, else bitwise
    params: dict | None = None     #: a search-space module's sample (its dimensions' values)

    def options(self):
        from kir.jit import Options
        return Options(opt_level=self.opt_level, pipeline=self.pipeline, codegen_opt=self.codegen_opt,
                       fp_contract=self.fp_contract, assembler_options=(f"--maxrregcount={self.maxrregcount}",) if self.maxrregcount else ())

    def variant(self, has_jit_args: bool, name: str = ""):
        """The kir.replay.Variant that runs this point (always compiled from the IR)."""
        from kir.replay.variant import Variant
        if self.recorded_code:
            return Variant(grid=self.grid, block=self.block, warmup=self.warmup, repeat=self.repeat,
                           timing=self.timing, name=name)
        threads = math.prod(self.block)
        return Variant(grid=self.grid, block=self.block, args="jit" if self.specialize_args and has_jit_args else (),
                       specialize_grid=self.specialize_dims, specialize_block=self.specialize_dims,
                       bounds=(self.max_threads or threads, self.min_blocks) if self.launch_bounds else None,
                       options=self.options(), warmup=self.warmup, repeat=self.repeat, timing=self.timing,
                       tolerance=_tolerance_from(self.tolerance), name=name)

    def describe(self) -> str:
        if self.params is not None:
            return ", ".join([f"{k} {_text(v)}" for k, v in self.params.items()] + [self._describe()])
        return self._describe()

    def _describe(self) -> str:
        parts = [f"block {'x'.join(map(str, self.block))}", f"grid {'x'.join(map(str, self.grid))}"]
        if self.recorded_code:
            return ", ".join(parts + ["the recorded code"])
        parts.append(f"pipeline {self.pipeline}" if self.pipeline else f"O{self.opt_level}")
        parts.append(f"codegen O{self.codegen_opt}")
        if self.maxrregcount:
            parts.append(f"maxrregcount {self.maxrregcount}")
        if self.fp_contract != "auto":
            parts.append(f"fp-contract {self.fp_contract}")
        parts.append("args " + ("specialized" if self.specialize_args else "generic"))
        if self.specialize_dims:
            parts.append("dims specialized")
        if self.launch_bounds:
            parts.append(f"bounds {self.max_threads or math.prod(self.block)},{self.min_blocks}")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Point":
        data = dict(data)
        data["block"], data["grid"] = tuple(data["block"]), tuple(data["grid"])
        return cls(**data)


@dataclass
class Space:
    """A validated search space (see the module's docstring)."""
    block: object = "recorded"
    launch_safety: str = "balanced"
    launch_dim: str = "auto"
    opt_level: list = field(default_factory=lambda: [3])
    pipeline: list | None = None
    codegen_opt: list = field(default_factory=lambda: [3])
    maxrregcount: list = field(default_factory=lambda: [0])
    fp_contract: list = field(default_factory=lambda: ["auto"])
    specialize_args: list = field(default_factory=lambda: [True])
    specialize_dims: list = field(default_factory=lambda: [False])
    launch_bounds: list = field(default_factory=lambda: [False])
    min_blocks: list = field(default_factory=lambda: [0])
    max_threads: list | None = None
    max_threads_policy: str = "block-threads"
    warmup: int = 1
    repeat: int = 20
    timing: str = "graph"
    tolerance: dict | None = None
    module: str | None = None      #: a search-space module, MODULE_OR_PATH:CLASS (the module's docstring)
    module_args: dict | None = None
    source: str = "preset standard"

    @classmethod
    def preset(cls, name: str = "standard") -> "Space":
        """One of the named spaces of PRESETS; OptionError for another name."""
        if name not in PRESETS:
            raise OptionError(f"--preset {name!r}: expected {', '.join(PRESETS)}")
        return cls.from_dict({"preset": name}, f"preset {name}")

    @classmethod
    def load(cls, path) -> "Space":
        from kir.files import load_json
        return cls.from_dict(load_json(path, f"--space {path}"), str(path))

    @classmethod
    def from_dict(cls, data, where: str = "space") -> "Space":
        if not isinstance(data, dict):
            raise OptionError(f"{where}: expected a JSON object of dimensions")
        data = dict(data)
        schema = data.pop("schema", SCHEMA)
        if schema != SCHEMA:
            raise OptionError(f"{where}: schema {schema!r}: this kir reads {SCHEMA}")
        preset = data.pop("preset", None)
        unknown = sorted(set(data) - set(DEFAULTS))
        if unknown:
            raise OptionError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; expected "
                              f"{', '.join(DEFAULTS)}")
        merged = dict(DEFAULTS)
        if preset is not None:
            if preset not in PRESETS:
                raise OptionError(f"{where}: preset {preset!r}: expected {', '.join(PRESETS)}")
            merged.update(PRESETS[preset])
        merged.update(data)
        space = cls(source=where)
        space.launch_safety = merged["launch_safety"]
        if space.launch_safety not in SAFETIES:
            raise OptionError(f"{where}: launch_safety {space.launch_safety!r}: expected {', '.join(SAFETIES)}")
        space.launch_dim = merged["launch_dim"]
        if space.launch_dim not in LAUNCH_DIMS:
            raise OptionError(f"{where}: launch_dim {space.launch_dim!r}: expected {', '.join(LAUNCH_DIMS)}")
        block = merged["block"]
        if block in ("auto", "recorded"):
            space.block = block
        elif isinstance(block, list) and block:
            space.block = [_dims3(b, f"{where}: block") for b in block]
            for b in space.block:
                if any(not 1 <= v <= limit for v, limit in zip(b, MAX_BLOCK)) or math.prod(b) > MAX_THREADS:
                    raise OptionError(f"{where}: block {list(b)}: beyond CUDA's limits "
                                      f"({MAX_THREADS} threads, {list(MAX_BLOCK)})")
        else:
            raise OptionError(f"{where}: block {block!r}: expected \"auto\", \"recorded\" or a list of [x, y, z]")
        space.opt_level = _choices(merged["opt_level"], where, "opt_level", int, range(4))
        space.codegen_opt = _choices(merged["codegen_opt"], where, "codegen_opt", int, range(4))
        space.maxrregcount = _choices(merged["maxrregcount"], where, "maxrregcount", int, range(256),
                                      "0 (none) or 16..255")
        if any(0 < r < 16 for r in space.maxrregcount):
            raise OptionError(f"{where}: maxrregcount: ptxas takes at least 16 registers (0: no limit)")
        from kir.jit.transform import FP_CONTRACT
        space.fp_contract = _choices(merged["fp_contract"], where, "fp_contract", str, FP_CONTRACT)
        space.min_blocks = _choices(merged["min_blocks"], where, "min_blocks", int, range(33))
        if merged["max_threads"] is not None:
            space.max_threads = _choices(merged["max_threads"], where, "max_threads", int, range(1, MAX_THREADS + 1),
                                         f"1..{MAX_THREADS}")
        space.max_threads_policy = merged["max_threads_policy"]
        if space.max_threads_policy not in MAX_THREADS_POLICIES:
            raise OptionError(f"{where}: max_threads_policy {space.max_threads_policy!r}: expected "
                              f"{', '.join(MAX_THREADS_POLICIES)}")
        for name in ("specialize_args", "specialize_dims", "launch_bounds"):
            setattr(space, name, _choices(merged[name], where, name, bool, (False, True)))
        if merged["pipeline"] is not None:
            pipelines = _choices(merged["pipeline"], where, "pipeline", str, None)
            from kir.jit import Options
            for text in pipelines:
                try:
                    Options(pipeline=text)
                except OptionError as error:
                    raise OptionError(f"{where}: pipeline {text!r}: {error}") from None
            space.pipeline = pipelines
        from kir.replay.variant import check_timing
        try:
            space.timing = check_timing(merged["timing"])
        except OptionError as error:
            raise OptionError(f"{where}: {error}") from None
        if merged["tolerance"] is not None:
            if not isinstance(merged["tolerance"], dict):
                raise OptionError(f"{where}: tolerance {merged['tolerance']!r}: expected an object "
                                  "{\"atol\", \"rtol\", \"ulp\", \"norm\", \"dtype\"}")
            try:
                space.tolerance = _tolerance_from(merged["tolerance"]).to_json()
            except TypeError as error:
                raise OptionError(f"{where}: tolerance: {error}") from None
            except OptionError as error:
                raise OptionError(f"{where}: tolerance: {error}") from None
        if merged["module"] is not None:
            if not isinstance(merged["module"], str) or ":" not in merged["module"]:
                raise OptionError(f"{where}: module {merged['module']!r}: expected MODULE_OR_PATH:CLASS")
            if not isinstance(merged["module_args"] or {}, dict):
                raise OptionError(f"{where}: module_args {merged['module_args']!r}: expected an object")
            space.module, space.module_args = merged["module"], dict(merged["module_args"] or {})
        elif merged["module_args"]:
            raise OptionError(f"{where}: module_args without a module")
        for name, low in (("warmup", 0), ("repeat", 1)):
            value = merged[name]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= 100000:
                raise OptionError(f"{where}: {name} {value!r}: expected an integer {low}..100000")
            setattr(space, name, value)
        return space

    def launch_only(self) -> "Space":
        """The space of a record without LLVM IR (an nvcc build): nothing to compile,
        so only the launch configuration, with the recorded code; "recorded" blocks
        become "auto" (one point would be the recorded launch again)."""
        import dataclasses
        return dataclasses.replace(self, block="auto" if self.block == "recorded" else self.block, opt_level=[3],
                                   pipeline=None, codegen_opt=[3], maxrregcount=[0], fp_contract=["auto"],
                                   specialize_args=[False],
                                   specialize_dims=[False], launch_bounds=[False], min_blocks=[0],
                                   source=f"{self.source}, launch only (no LLVM IR)")

    def for_device(self, record) -> "Space":
        """The space as it applies to the record's GPU API (kir.replay.backends.backend_name):
        on HIP (AMD GPUs) the trials are timed "each" when the space asks for CUDA graphs
        or CUPTI (HipBackend.timings), and "maxrregcount" is [0]: it is a ptxas option,
        and an AMDGPU kernel's registers follow from its launch bounds instead
        (amdgpu-flat-work-group-size and amdgpu-waves-per-eu: docs/tune.md, "Mneme's
        options"). CUDA records: the space as it is."""
        import dataclasses

        from kir.replay.backends import HipBackend, backend_name
        if backend_name(record) != "hip":
            return self
        changed = {}
        if self.timing not in HipBackend.timings:
            changed["timing"] = "each"
        if self.maxrregcount != [0]:
            changed["maxrregcount"] = [0]
        if not changed:
            return self
        said = ", ".join(f"{k} {v}" for k, v in changed.items())
        return dataclasses.replace(self, **changed, source=f"{self.source}, on HIP: {said}")

    def blocks(self, record) -> list[tuple[int, int, int]]:
        launch = record.launch
        if self.block == "recorded":
            return [tuple(launch.block)]
        if self.block == "auto":
            return block_candidates(launch.block, launch.grid, self.launch_safety, self.launch_dim)
        shapes = [tuple(launch.block)] + [b for b in self.block if b != tuple(launch.block)]
        return shapes if tuple(launch.block) in self.block else shapes[1:]

    def sample(self, trial, record, ordinal: bool = False) -> Point:
        """An Optuna trial's choices (suggest_categorical on every dimension with more
        than one choice; the choices are encoded as text, which every storage keeps).
        `ordinal`: the non-boolean dimensions as the index of their choice
        (suggest_int), which CMA-ES models (it leaves categorical ones to a random
        sampler: optuna.samplers.CmaEsSampler)."""
        launch = record.launch

        def pick(name, choices):
            if len(choices) == 1:
                return choices[0]
            if ordinal and not isinstance(choices[0], bool):
                return choices[trial.suggest_int(name, 0, len(choices) - 1)]
            texts = [_text(c) for c in choices]
            chosen = trial.suggest_categorical(name, texts)
            return choices[texts.index(chosen)]

        if self.module:
            plugin = self.plugin(record)
            params = {name: pick(name, choices) for name, choices in plugin_dimensions(plugin, self.module).items()}
            return self._plugin_point(plugin, record, params)
        block = pick("block", self.blocks(record))
        grid = tuple(launch.grid) if block == tuple(launch.block) else \
            derived_grid(launch.block, launch.grid, block)
        point = Point(block=block, grid=grid, warmup=self.warmup, repeat=self.repeat, timing=self.timing,
                      tolerance=self.tolerance, recorded_launch=(block, grid) == (tuple(launch.block), tuple(launch.grid)))
        if self.pipeline:
            point.pipeline = pick("pipeline", self.pipeline)
        else:
            point.opt_level = pick("opt_level", self.opt_level)
        point.codegen_opt = pick("codegen_opt", self.codegen_opt)
        point.maxrregcount = pick("maxrregcount", self.maxrregcount)
        point.fp_contract = pick("fp_contract", self.fp_contract)
        point.specialize_args = pick("specialize_args", self.specialize_args)
        point.specialize_dims = pick("specialize_dims", self.specialize_dims)
        point.launch_bounds = pick("launch_bounds", self.launch_bounds)
        if point.launch_bounds:
            point.min_blocks = pick("min_blocks", self.min_blocks)
            point.max_threads = pick("max_threads", self.max_threads_choices(record))
        return point

    def max_threads_choices(self, record) -> list[int]:
        """The launch bounds' max threads choices (0: the block's threads): "max_threads",
        else the policy's (Mneme's BuiltinTuneSearchSpace: a range wins over the policy)."""
        if self.max_threads is not None:
            return self.max_threads
        return {"block-threads": [0], "recorded": [math.prod(record.launch.block)], "hardware": [MAX_THREADS],
                "powers-of-two": [64, 128, 256, 512, 1024]}[self.max_threads_policy]

    def plugin(self, record):
        """The search-space module's object for `record` (one per record and process)."""
        cache = _PLUGINS.setdefault((self.module, json.dumps(self.module_args, sort_keys=True, default=str)), {})
        key = (str(record.path), record.launch.identity)
        if key not in cache:
            cls = load_space_class(self.module)
            cache[key] = call_plugin(self.module, "the class", cls, record, **(self.module_args or {}))
        return cache[key]

    def _plugin_point(self, plugin, record, params: dict) -> Point:
        """The Point a module's sample `params` stands for (its `derived`)."""
        launch = record.launch
        fields = call_plugin(self.module, "derived()", plugin.derived, dict(params)) or {}
        if not isinstance(fields, dict):
            raise OptionError(f"--space-module {self.module}: derived() returned {type(fields).__name__}, "
                              "expected a dict of Point fields")
        allowed = {"block", "grid", "opt_level", "pipeline", "codegen_opt", "maxrregcount", "fp_contract",
                   "specialize_args", "specialize_dims", "launch_bounds", "min_blocks", "max_threads"}
        unknown = sorted(set(fields) - allowed)
        if unknown:
            raise OptionError(f"--space-module {self.module}: derived() set {', '.join(map(repr, unknown))}; "
                              f"expected {', '.join(sorted(allowed))}")
        fields = dict(fields)
        block = _dims3(list(fields.pop("block", launch.block)), f"--space-module {self.module}: block")
        grid = fields.pop("grid", None)
        grid = _dims3(list(grid), f"--space-module {self.module}: grid") if grid is not None else \
            tuple(launch.grid) if block == tuple(launch.block) else derived_grid(launch.block, launch.grid, block)
        return Point(block=block, grid=grid, warmup=self.warmup, repeat=self.repeat, timing=self.timing,
                     tolerance=self.tolerance, params=json.loads(json.dumps(params, default=str)),
                     recorded_launch=(block, grid) == (tuple(launch.block), tuple(launch.grid)), **fields)

    def invalid(self, point: Point, record=None) -> str | None:
        """Why `point` cannot run, found before anything is compiled (Mneme's
        SearchSpace.constraints, BuiltinTuneSearchSpace.constraints); None: it can. Such a
        sample is skipped, not run (kir.tune.study.TuneTask._skip). A launch bound below the
        block's threads: the launch would fail (kir.replay.variant.resolve refuses it too)."""
        if self.module and record is not None and point.params is not None:
            check = getattr(self.plugin(record), "constraints", None)
            if check is not None and not call_plugin(self.module, "constraints()", check, dict(point.params)):
                return "the search-space module's constraints refuse it"
        threads = math.prod(point.block)
        if point.launch_bounds and point.max_threads and point.max_threads < threads:
            return (f"launch bounds of {point.max_threads} threads below the block's {threads} "
                    f"({'x'.join(map(str, point.block))})")
        return None

    def recorded(self) -> dict:
        """The request for the baseline: the recorded code at the recorded launch,
        timed as the trials are (kir.tune.trial.evaluate)."""
        return {"recorded": True, "warmup": self.warmup, "repeat": self.repeat, "timing": self.timing,
                "tolerance": self.tolerance}

    def baseline_params(self, record, ordinal: bool = False) -> dict:
        """The trial to run first (Optuna's enqueue_trial): the recorded launch with
        kir.jit's default options — what the JIT client compiles without tuning
        (`ordinal`: as `sample` encodes it)."""
        params = {}

        def put(name, choices, value):
            if len(choices) > 1:
                params[name] = choices.index(value) if ordinal and not isinstance(value, bool) else _text(value)
        if self.module:
            plugin = self.plugin(record)
            dims = plugin_dimensions(plugin, self.module)
            first = call_plugin(self.module, "baseline()", plugin.baseline) if hasattr(plugin, "baseline") else {}
            if not isinstance(first, dict) or set(first) - set(dims):
                raise OptionError(f"--space-module {self.module}: baseline() must return a dict of its dimensions' "
                                  f"values, got {first!r}")
            for name, choices in dims.items():
                value = first.get(name, choices[0])
                if value not in choices:
                    raise OptionError(f"--space-module {self.module}: baseline() {name} {value!r}: not one of its "
                                      "choices")
                put(name, choices, value)
            return params
        put("block", self.blocks(record), tuple(record.launch.block))
        for name, default in (("opt_level", 3), ("codegen_opt", 3), ("maxrregcount", 0), ("fp_contract", "auto"),
                              ("specialize_args", True), ("specialize_dims", False), ("launch_bounds", False)):
            choices = getattr(self, name)
            if name == "opt_level" and self.pipeline:
                continue
            put(name, choices, default if default in choices else choices[-1])
        if self.pipeline:
            put("pipeline", self.pipeline, self.pipeline[0])
        if True in self.launch_bounds:  # Optuna's GridSampler needs every dimension of its grid
            put("min_blocks", self.min_blocks, 0 if 0 in self.min_blocks else self.min_blocks[0])
            choices, threads = self.max_threads_choices(record), math.prod(record.launch.block)
            fits = [c for c in choices if c == 0 or c >= threads]
            put("max_threads", choices, 0 if 0 in choices else min(fits) if fits else choices[-1])
        return params

    def grid(self, record) -> dict:
        """Every dimension with more than one choice, its choices as `sample` suggests
        them: the search space of Optuna's GridSampler (`--sampler grid|exhaustive`)."""
        if self.module:
            dims = plugin_dimensions(self.plugin(record), self.module)
            return {k: [_text(c) for c in v] for k, v in dims.items() if len(v) > 1}
        dims = {"block": self.blocks(record)}
        if self.pipeline:
            dims["pipeline"] = self.pipeline
        else:
            dims["opt_level"] = self.opt_level
        for name in ("codegen_opt", "maxrregcount", "fp_contract", "specialize_args", "specialize_dims",
                     "launch_bounds"):
            dims[name] = getattr(self, name)
        if True in self.launch_bounds:
            dims["min_blocks"] = self.min_blocks
            dims["max_threads"] = self.max_threads_choices(record)
        return {k: [_text(c) for c in v] for k, v in dims.items() if len(v) > 1}

    def size(self, record) -> int:
        """How many distinct points the space holds."""
        if self.module:
            return math.prod(len(v) for v in plugin_dimensions(self.plugin(record), self.module).values())
        n = len(self.blocks(record)) * len(self.pipeline or self.opt_level) * len(self.codegen_opt)
        n *= len(self.maxrregcount) * len(self.fp_contract) * len(self.specialize_args) * len(self.specialize_dims)
        bounds = (len(self.min_blocks) * len(self.max_threads_choices(record)) if True in self.launch_bounds else 0) \
            + (False in self.launch_bounds)
        return n * bounds

    def describe(self, record) -> dict:
        """JSON-ready: every dimension's choices, as resolved for `record`."""
        if self.module:
            dims = plugin_dimensions(self.plugin(record), self.module)
            return {"source": self.source, "module": self.module, "module_args": self.module_args,
                    "dimensions": json.loads(json.dumps(dims, default=str)), "warmup": self.warmup,
                    "repeat": self.repeat, "timing": self.timing, "tolerance": self.tolerance,
                    "points": self.size(record)}
        return {"source": self.source, "block": [list(b) for b in self.blocks(record)],
                "launch_safety": self.launch_safety, "launch_dim": self.launch_dim, "opt_level": None if self.pipeline else self.opt_level,
                "pipeline": self.pipeline, "codegen_opt": self.codegen_opt, "maxrregcount": self.maxrregcount,
                "fp_contract": self.fp_contract, "specialize_args": self.specialize_args, "specialize_dims": self.specialize_dims,
                "launch_bounds": self.launch_bounds, "min_blocks": self.min_blocks,
                "max_threads": self.max_threads_choices(record), "max_threads_policy": self.max_threads_policy,
                "warmup": self.warmup,
                "repeat": self.repeat, "timing": self.timing, "tolerance": self.tolerance,
                "points": self.size(record)}


_PLUGINS: dict = {}  #: Space.plugin's objects, by module and arguments, then record


def load_space_class(spec: str):
    """CLASS of MODULE_OR_PATH:CLASS: a module name, or a .py file (a path: Mneme's
    load_custom_space)."""
    module_name, _, name = spec.rpartition(":")
    if not module_name or not name:
        raise OptionError(f"--space-module {spec!r}: expected MODULE_OR_PATH:CLASS")
    if module_name.endswith(".py") or "/" in module_name:
        import importlib.util
        from pathlib import Path
        path = Path(module_name).resolve()
        if not path.is_file():
            raise OptionError(f"--space-module {spec}: {path}: no such file")
        loader = importlib.util.spec_from_file_location(f"kir_user_space_{path.stem}", str(path))
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except Exception as error:  # the user's module: its error, in one line
            raise OptionError(f"--space-module {spec}: {type(error).__name__}: {error}") from None
        cls = getattr(module, name, None)
        if not callable(cls):
            raise OptionError(f"--space-module {spec}: {path} has no class {name}")
        return cls
    from kir.distribute import load_function
    return load_function(spec, "--space-module")


def call_plugin(spec: str, what: str, function, *args, **kwargs):
    """A search-space module's call; what it raises is one line naming the module and call
    (an OptionError: exit 2), never a traceback."""
    try:
        return function(*args, **kwargs)
    except OptionError:
        raise
    except Exception as error:  # the user's code
        raise OptionError(f"--space-module {spec}: {what}: {type(error).__name__}: {error}") from None


def plugin_dimensions(plugin, spec: str) -> dict[str, list]:
    """A search-space module's dimensions as lists of choices (the module's docstring)."""
    dims = call_plugin(spec, "dimensions()", plugin.dimensions)
    if not isinstance(dims, dict) or not dims:
        raise OptionError(f"--space-module {spec}: dimensions() must return a non-empty dict")
    out = {}
    for name, param in dims.items():
        if isinstance(param, (list, tuple)):
            choices = list(param)
        elif hasattr(param, "value"):
            choices = [param.value]
        elif hasattr(param, "choices"):
            choices = list(param.choices)
        elif all(hasattr(param, a) for a in ("low", "high")):
            if not all(isinstance(getattr(param, a), int) for a in ("low", "high")):
                raise OptionError(f"--space-module {spec}: dimension {name!r}: a real range; kir tune samples "
                                  "choices (give a list, or an integer range)")
            choices = list(range(param.low, param.high + 1, getattr(param, "step", 1) or 1))
        else:
            choices = [param]
        if not choices:
            raise OptionError(f"--space-module {spec}: dimension {name!r}: no choices")
        out[str(name)] = choices
    return out


def _tolerance_from(data: dict | None):
    from kir.replay.comparison import Tolerance
    return Tolerance.from_json(data)


def _text(value) -> str:
    if isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _choices(value, where: str, name: str, kind, allowed, allowed_text: str | None = None) -> list:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise OptionError(f"{where}: {name}: an empty list of choices")
    out = []
    for v in values:
        ok = isinstance(v, kind) and (kind is bool or not isinstance(v, bool))
        if not ok or (allowed is not None and v not in allowed):
            expected = allowed_text or (", ".join(map(_text, allowed)) if allowed is not None else kind.__name__)
            raise OptionError(f"{where}: {name}: {v!r} is not one of {expected}")
        if v not in out:
            out.append(v)
    return out
