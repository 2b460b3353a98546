"""Replay variants (issue 13 §1): a recorded launch run with another launch
configuration and/or code compiled by `kir.jit.compile` from the record's IR,
specialized and optimized as a JIT client would be. Everything here is CPU work;
`kir.replay.Replayer.run(variant)` carries a variant out on a GPU.

    from kir.replay import Replayer, Variant
    variants = [Variant(),                                      # the recorded code, as recorded
                Variant(block=(128, 1, 1), grid=(2048, 1, 1)),  # another launch configuration
                Variant(args="jit", specialize_block=True,      # compiled from the IR, specialized
                        options={"opt_level": 3})]
    with Replayer(record, cache="jit-cache") as replayer:
        for v in variants:
            result = replayer.run(v)
            print(result.median_ms, result.verified, result.registers, result.jit_key)

A variant's JIT key is the one the reference JIT client (libkir/jit/client.cpp)
computes for the same launch: `kir.hashing.jit_key_of_launch` (kir_jit_key) with
the record's static hash, the device's arch, the recorded argument bytes, the
specialized arguments as `kir_jit_arg`s (arrays and objects read from the
prologue), grid/block when specialized, the launch's dynamic shared memory,
the launch bounds and `kir.jit.Options.config()` (docs/hashing.md, docs/jit.md).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kir import hashing
from kir.errors import OptionError, PlanError
from kir.jit import ArgValue, Options, Specialization, for_target
from kir.jit.values import SCALARS, U32_MAX, dims, type_code
from kir.model import ArgType, JitArg, JitArgKind
from kir.record import Record
from kir.replay.comparison import Tolerance

#: kir_jit_arg kinds as the record names them -> kir_jit_arg_kind
KINDS = {kind.value: kind for kind in JitArgKind}
#: kir_arg_type value -> kir.jit type name
TYPE_NAMES = {int(t): t.name for t in ArgType}
#: kir_arg_type value -> element size (bytes: 1)
#: how a variant's launches are timed (Variant.timing), and the rounds of "graph"
TIMINGS = ("each", "graph", "activity")
GRAPH_ROUNDS = 5


def check_timing(value) -> str:
    """`value` if it is one of TIMINGS, else an OptionError naming them."""
    if value not in TIMINGS:
        raise OptionError(f"timing {value!r}: expected {', '.join(TIMINGS[:-1])} or {TIMINGS[-1]}")
    return value
TYPE_SIZES = {int(t): t.size or 1 for t in ArgType}


@dataclass
class Variant:
    """One way to run a recorded launch.

    - grid / block / shared_bytes: the launch configuration (None: the recorded one).
    - args: the arguments to specialize, each with its RECORDED value: "jit" (every
      runtime-constant argument the record lists, `kernel.jit_args`: what the JIT
      client specializes), or a list of positions (1-based ints, typed by the
      record's `jit_args`) and/or "POS:TYPE" texts ("4:i32") for arguments the
      record does not annotate.
    - specialize_grid / specialize_block: the dims become constants of the code (and
      enter the JIT key);
    - bounds: (max threads per block, min blocks per SM) launch bounds;
    - options: kir.jit.Options (or a dict of its fields): the compile options (None: not
      compiled unless something is specialized, then kir.jit's defaults).
    - warmup / repeat: untimed then timed launches, each from the prologue;
    - timing: "each" (default: every timed launch alone, from the prologue, between
      two CUDA events: the kernel's time with the launch latency) or "graph" (after
      one launch from the prologue that is verified: `repeat` launches back to back
      in a CUDA graph, timed together, GRAPH_ROUNDS times; each time is the mean per
      launch — what a kernel costs in an app's stream of launches, without the
      host; the data is not restored between them) or "activity" (every timed launch
      alone, from the prologue, as "each", timed by the GPU's own start and end of the
      kernel in CUPTI's activity records: without the launch latency and the host;
      needs cupti-python, the `timing` extra: kir.replay.activity);
    - tolerance: a comparison.Tolerance (or a dict of them by region), None: bitwise.
    - name: a label for tables."""
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    shared_bytes: int | None = None
    args: object = ()
    specialize_grid: bool = False
    specialize_block: bool = False
    bounds: tuple[int, int] | None = None
    options: Options | None = None
    warmup: int = 1
    repeat: int = 10
    timing: str = "each"
    tolerance: object = None
    name: str = ""

    def __post_init__(self) -> None:
        self.grid = dims(self.grid, "grid")
        self.block = dims(self.block, "block")
        if self.shared_bytes is not None and (isinstance(self.shared_bytes, bool) or
                                              not isinstance(self.shared_bytes, int) or
                                              not 0 <= self.shared_bytes <= U32_MAX):
            raise OptionError(f"shared_bytes {self.shared_bytes!r}: expected 0..{U32_MAX} bytes")
        if isinstance(self.args, str) and self.args != "jit":
            self.args = [self.args]
        if not isinstance(self.args, str):
            self.args = tuple(_arg_spec(a) for a in self.args)
            positions = [p for p, _ in self.args]
            if len(set(positions)) != len(positions):
                raise OptionError(f"args: a position is given twice ({positions})")
        if self.bounds is not None:
            self.bounds = Specialization(bounds=self.bounds).bounds
        if self.options is not None:
            self.options = Options.coerce(self.options)
        for name in ("warmup", "repeat"):
            value = getattr(self, name)
            low = 0 if name == "warmup" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise OptionError(f"{name} {value!r}: expected an integer >= {low}")
        check_timing(self.timing)
        if self.tolerance is not None and not isinstance(self.tolerance, (Tolerance, dict)):
            raise OptionError(f"tolerance: expected a Tolerance or a dict of them, not "
                              f"{type(self.tolerance).__name__}")
        for flag in ("specialize_grid", "specialize_block"):
            if not isinstance(getattr(self, flag), bool):
                raise OptionError(f"{flag}: expected True or False")

    @property
    def needs_compile(self) -> bool:
        """Any specialization or compile option: the code is compiled from the IR."""
        return bool(self.args) or self.specialize_grid or self.specialize_block or \
            self.bounds is not None or self.options is not None

    def compile_options(self) -> Options:
        return self.options if self.options is not None else Options()

    def launch(self, record: Record) -> tuple[tuple[int, int, int], tuple[int, int, int], int]:
        """(grid, block, dynamic shared memory) of this variant of `record`'s launch."""
        launch = record.launch
        return (self.grid or tuple(launch.grid), self.block or tuple(launch.block),
                launch.shared_bytes if self.shared_bytes is None else self.shared_bytes)

    def describe(self) -> str:
        """One line: what differs from the recording."""
        parts = []
        for what in ("grid", "block"):
            if getattr(self, what):
                parts.append(f"{what} {','.join(map(str, getattr(self, what)))}")
        if self.shared_bytes is not None:
            parts.append(f"shared {self.shared_bytes}")
        if self.args:
            parts.append("args " + (self.args if isinstance(self.args, str) else
                                    ",".join(f"{p}{':' + t if t else ''}" for p, t in self.args)))
        dimsd = [n for n, on in (("grid", self.specialize_grid), ("block", self.specialize_block)) if on]
        if dimsd:
            parts.append("dims " + ",".join(dimsd))
        if self.bounds:
            parts.append(f"bounds {self.bounds[0]},{self.bounds[1]}")
        if self.options is not None:
            config = dict(self.options.config())
            parts.append(" ".join(f"{k}={v.decode()}" for k, v in config.items()
                                  if v and dict(Options().config()).get(k) != v) or "options default")
        return (self.name + ": " if self.name else "") + ("; ".join(parts) or "as recorded")


def _arg_spec(item) -> tuple[int, str | None]:
    """(position, type name or None: the record's)."""
    if isinstance(item, bool):
        raise OptionError(f"args: {item!r} is not a position")
    if isinstance(item, int):
        position, kind = item, None
    elif isinstance(item, tuple) and len(item) == 2:
        position, kind = item
    elif isinstance(item, str):
        head, _, kind = item.partition(":")
        try:
            position = int(head)
        except ValueError:
            raise OptionError(f"args: {item!r}: expected POS or POS:TYPE, e.g. 4:i32") from None
        kind = kind or None
    else:
        raise OptionError(f"args: {item!r}: expected a position, POS:TYPE text or (position, type)")
    if isinstance(position, bool) or not isinstance(position, int) or not 1 <= position <= U32_MAX:
        raise OptionError(f"args: position {position!r}: expected 1..{U32_MAX} (1-based)")
    if kind is not None and kind not in TYPE_NAMES.values():
        raise OptionError(f"args: argument {position}: unknown type {kind!r}; expected one of "
                          f"{', '.join(TYPE_NAMES.values())}")
    return position, kind


# --- a variant against a record (CPU) ------------------------------------------------

@dataclass
class SpecializedArg:
    """One specialized argument: what kir.jit.compile gets (`value`) and what the JIT
    key gets (`jit_arg`, a kir_jit_arg over the recorded argument bytes)."""
    value: ArgValue
    jit_arg: JitArg           #: kir.model.JitArg
    pointer: int | None = None  #: array / object read through this address (None: by value)


@dataclass
class Resolved:
    """A variant applied to a record: everything compile and key need."""
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    args: list[SpecializedArg] = field(default_factory=list)
    specialization: Specialization | None = None   #: None: the recorded code is run
    options: Options | None = None


def resolve(record: Record, variant: Variant, need_ir: bool = True) -> Resolved:
    """The variant's launch configuration and, when it is compiled, its specialization
    with the recorded values (arrays and objects passed by pointer read from the
    prologue). OptionError / PlanError name what does not fit the record (with
    `need_ir`, a compiled variant of a record without IR)."""
    grid, block, shared = variant.launch(record)
    out = Resolved(grid, block, shared)
    if not variant.needs_compile:
        return out
    if need_ir and record.kernel.ir is None:
        raise PlanError(f"{record.path}: the variant is compiled from the kernel's LLVM IR "
                        f"({variant.describe()}), and the record holds none for {record.kernel.name}")
    threads = block[0] * block[1] * block[2]
    if variant.bounds is not None and threads > variant.bounds[0]:
        raise OptionError(f"bounds {variant.bounds[0]},{variant.bounds[1]}: at most {variant.bounds[0]} threads "
                          f"per block, the launch has {threads} (block {','.join(map(str, block))})")
    out.args = specialized_args(record, variant)
    out.specialization = Specialization(args=[a.value for a in out.args],
                                        grid=grid if variant.specialize_grid else None,
                                        block=block if variant.specialize_block else None,
                                        bounds=variant.bounds, shared_bytes=shared)
    out.options = variant.compile_options()
    return out


def specialized_args(record: Record, variant: Variant) -> list[SpecializedArg]:
    annotated = {a.position: a for a in record.kernel.jit_args}
    if variant.args == "jit":
        if not annotated:
            raise OptionError(f"args 'jit': the record lists no runtime-constant arguments for "
                              f"{record.kernel.name} (kernel.jit_args); name positions as POS:TYPE")
        wanted = [(p, None) for p in sorted(annotated)]
    else:
        wanted = list(variant.args)
    params, values = record.kernel.params, record.launch.args
    out = []
    for position, kind in wanted:
        if position > len(params) or position > len(values):
            raise OptionError(f"args: argument {position}: {record.kernel.name} takes {len(params)} parameters")
        raw = values[position - 1]
        if kind is not None:
            out.append(_typed(position, kind, raw))
        elif position in annotated:
            out.append(_annotated(record, annotated[position], raw))
        else:
            raise OptionError(f"args: argument {position} of {record.kernel.name} is not a runtime-constant "
                              "argument the record lists (kernel.jit_args): give its type, POS:TYPE")
    return out


def _typed(position: int, kind: str, raw: bytes) -> SpecializedArg:
    size = SCALARS.get(kind, (len(raw),))[0]
    if size != len(raw):
        raise OptionError(f"args: argument {position} is {len(raw)} bytes, a {kind} is {size}")
    if kind == "bytes":
        jit = hashing.JitArg(position, hashing.OBJECT, type_code("bytes"), by_value=1, count=len(raw))
    else:
        jit = hashing.JitArg(position, hashing.SCALAR, type_code(kind))
    return SpecializedArg(ArgValue(position, kind, raw), jit)


def _annotated(record: Record, a: JitArg, raw: bytes) -> SpecializedArg:
    kind = KINDS.get(a.kind)
    if kind is None or a.type not in TYPE_NAMES:
        raise PlanError(f"{record.path}: jit_args: argument {a.position} is of kind {a.kind!r}, "
                        f"type {a.type}: not a kir_jit_arg this kir knows")
    jit = hashing.JitArg(a.position, kind, a.type, by_value=int(a.by_value), count=a.count,
                         count_position=a.count_position, count_type=a.count_type)
    name = TYPE_NAMES[a.type]
    if kind == hashing.SCALAR:
        size = SCALARS[name][0] if name in SCALARS else len(raw)
        if size != len(raw):
            raise PlanError(f"{record.path}: jit_args: argument {a.position} is a {name} ({size} bytes), "
                            f"the recorded argument is {len(raw)} bytes")
        return SpecializedArg(ArgValue(a.position, name, raw), jit)
    size = a.count if kind == hashing.OBJECT else _count(record, a) * TYPE_SIZES[a.type]
    # specialized as bytes, keyed as kir_jit_key keys it: an array by its element type
    key_type = name
    if a.by_value:
        if size > len(raw):
            raise PlanError(f"{record.path}: argument {a.position}: {size} bytes by value, the argument "
                            f"is {len(raw)}")
        return SpecializedArg(ArgValue(a.position, "bytes", raw[:size], key_type=key_type), jit)
    if len(raw) != 8:
        raise PlanError(f"{record.path}: argument {a.position} is read through a pointer, but is "
                        f"{len(raw)} bytes")
    pointer = struct.unpack("<Q", raw)[0]
    return SpecializedArg(ArgValue(a.position, "bytes", read_prologue(record, pointer, size, a.position),
                                   key_type=key_type), jit, pointer)


def _count(record: Record, a: JitArg) -> int:
    if not a.count_position:
        return a.count
    params = record.launch.args
    if a.count_position > len(params) or a.count_type not in TYPE_NAMES:
        raise PlanError(f"{record.path}: argument {a.position}: its count is argument {a.count_position} "
                        f"of type {a.count_type}, which the launch does not have")
    name = TYPE_NAMES[a.count_type]
    size, fmt = SCALARS.get(name, (None, None))
    if fmt is None or name.startswith(("f", "b")):
        raise PlanError(f"{record.path}: argument {a.position}: its count argument is a {name}")
    count = struct.unpack(fmt, params[a.count_position - 1][:size])[0]
    if count < 0:
        raise PlanError(f"{record.path}: argument {a.position}: its count (argument {a.count_position}) "
                        f"is {count}")
    return int(count)


def read_prologue(record: Record, address: int, size: int, position: int = 0) -> bytes:
    """`size` bytes at `address` as the prologue holds them (the memory the launch saw)."""
    for region in record.regions:
        if region.snapshotted and region.address <= address and address + size <= region.address + region.size:
            return record.prologue(region, address - region.address, size)  # only the chunks holding them
    raise PlanError(f"{record.path}: argument {position}: {size} bytes at {address:#x} are in no "
                    "snapshotted region: the value cannot be read")


def jit_key(record: Record, variant: Variant | Resolved, arch: str, config=None) -> str | None:
    """The JIT key of the variant's code on an `arch` device, as the JIT client
    computes it at that launch (kir_jit_key); None when the variant runs the recorded
    code (not compiled by kir.jit: it has no JIT key). The record needs no IR for it.
    `config`: the client's CONFIG records (None: the variant's options' config())."""
    r = variant if isinstance(variant, Resolved) else resolve(record, variant, need_ir=False)
    if r.specialization is None:
        return None
    memory = {}
    for a in r.args:
        if a.pointer is not None:
            memory[a.pointer] = a.value.value
    s = r.specialization
    return hashing.jit_key_of_launch(
        record.kernel.static_hash, arch, list(record.launch.args), [a.jit_arg for a in r.args],
        memory=memory, grid=r.grid, block=r.block, specialize_grid=s.grid is not None,
        specialize_block=s.block is not None, shared_bytes=r.shared_bytes, bounds=s.bounds,
        config=for_target(r.options, arch).config() if config is None else config, param_sizes=[p.size for p in record.kernel.params])


def compile_variant(record: Record, variant: Variant | Resolved, arch: str):
    """kir.jit.compile of the record's IR for the variant (a CompiledKernel), or None
    when the variant runs the recorded code."""
    import kir.jit
    r = variant if isinstance(variant, Resolved) else resolve(record, variant)
    if r.specialization is None:
        return None
    return kir.jit.compile(record.code("ir"), record.kernel.name, arch, specialize=r.specialization,
                           options=r.options, static_hash=record.kernel.static_hash)


__all__ = ["compile_variant", "GRAPH_ROUNDS", "jit_key", "KINDS", "read_prologue", "resolve", "Resolved",
           "specialized_args", "SpecializedArg", "TIMINGS", "TYPE_NAMES", "TYPE_SIZES", "Variant"]
