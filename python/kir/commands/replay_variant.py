"""The variant options of `kir replay` (kir.replay.variant): specialize the recorded
launch's arguments, dims and launch bounds, set compile options, and run (or, with
--plan, compile and key) the code kir.jit compiles from the record's IR."""
from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from kir.errors import OptionError
from kir.replay.variant import TIMINGS


def add_variant_arguments(parser) -> None:
    group = parser.add_argument_group("a variant compiled from the record's IR (kir.jit)")
    group.add_argument("--specialize", action="append", default=[], metavar="POS[:TYPE]|jit",
                       help="specialize argument POS with its recorded value (typed by the record's "
                            "jit_args, or TYPE: i32, f64, ...); 'jit': every runtime-constant argument "
                            "the record lists (what the JIT client specializes). Repeatable")
    group.add_argument("--specialize-dims", metavar="grid,block",
                       help="make the launch's grid and/or block dimensions constants of the code")
    group.add_argument("--bounds", metavar="MAXT[,MINB]", help="launch bounds")
    group.add_argument("-O", "--opt-level", type=int, choices=range(4), metavar="0-3",
                       help="LLVM optimization level (compiles from the IR)")
    group.add_argument("--pipeline", metavar="TEXT", help="an LLVM pass pipeline instead of -O")
    group.add_argument("--ptxas-option", action="append", default=[], metavar="OPT",
                       help="an option for ptxas, e.g. --maxrregcount=32. Repeatable")
    group.add_argument("--fp-contract", choices=("auto", "fast", "on", "off"), default=None,
                       help="floating-point contraction of the variant (default auto: as the IR was built; "
                            "off: bit-identical with a -ffp-contract=off build)")
    group.add_argument("--warmup", type=int, default=None, metavar="N",
                       help="untimed launches before the timed ones (default 1 for a variant)")
    group.add_argument("--timing", choices=TIMINGS, default=None,
                       help="each: every timed launch alone from the prologue, between CUDA events (default); "
                            "graph: --repeat launches back to back in a CUDA graph, the mean per launch (after one "
                            "verified launch); activity: as each, timed by the kernel's own start and end in CUPTI's "
                            "activity records (no launch latency; the timing extra: cupti-python)")
    group.add_argument("--jit-cache", metavar="DIR",
                       help="store the variant's compiled code in this kernel-object cache under its JIT key")


@dataclass(frozen=True)
class VariantOptions:
    """The variant options, read from the command line (`from_args`, checked there):
    what kir.replay.Variant takes besides the launch, the repeat and the tolerance."""
    asked: bool = False                     #: any variant option given
    args: object = ()                       #: "jit", or the --specialize texts
    specialize_grid: bool = False
    specialize_block: bool = False
    bounds: tuple[int, ...] | None = None
    options: dict | None = None             #: kir.jit.Options fields (-O, --pipeline, --ptxas-option)
    warmup: int = 1
    timing: str = "each"
    jit_cache: str | None = None

    @staticmethod
    def wanted(args: argparse.Namespace) -> bool:
        """Whether the command line gives any variant option."""
        return bool(args.specialize or args.specialize_dims or args.bounds or args.opt_level is not None or
                    args.pipeline or args.ptxas_option or args.warmup is not None or args.jit_cache or
                    args.timing is not None or getattr(args, "fp_contract", None) is not None)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> VariantOptions:
        specialize = list(args.specialize)
        if "jit" in specialize and len(specialize) > 1:
            raise OptionError("--specialize jit stands alone: it names every runtime-constant argument")
        dims = [d.strip() for d in (args.specialize_dims or "").split(",") if d.strip()]
        if set(dims) - {"grid", "block"}:
            raise OptionError(f"--specialize-dims {args.specialize_dims!r}: expected grid, block or grid,block")
        options = None
        if args.opt_level is not None or args.pipeline or args.ptxas_option or args.fp_contract is not None:
            options = {"opt_level": 3 if args.opt_level is None else args.opt_level, "pipeline": args.pipeline,
                       "assembler_options": tuple(args.ptxas_option), "fp_contract": args.fp_contract or "auto"}
        bounds = None
        if args.bounds:
            try:
                bounds = tuple(int(x) for x in args.bounds.split(","))
            except ValueError:
                raise OptionError(f"--bounds {args.bounds!r}: expected MAXT[,MINB]") from None
        return cls(asked=cls.wanted(args), args="jit" if specialize == ["jit"] else tuple(specialize),
                   specialize_grid="grid" in dims, specialize_block="block" in dims, bounds=bounds,
                   options=options, warmup=1 if args.warmup is None else args.warmup, timing=args.timing or "each",
                   jit_cache=args.jit_cache)

    def build(self, grid, block, shared_bytes: int | None, repeat: int, tolerance):
        """The kir.replay.Variant of these options for a launch (None: the recorded one)."""
        from kir.replay import Variant
        return Variant(grid=grid, block=block, shared_bytes=shared_bytes,
                       args=self.args if self.args == "jit" else list(self.args),
                       specialize_grid=self.specialize_grid, specialize_block=self.specialize_block,
                       bounds=self.bounds, options=self.options, warmup=self.warmup, repeat=repeat,
                       tolerance=tolerance, timing=self.timing)


def plan_variant(record, variant, arch: str, cache: str | None = None) -> dict:
    """The variant's part of a plan: its launch, its specialization, its JIT key on
    `arch` and, when compiled, the compiled code's summary (compiled now: an IR that
    does not compile is an error of the plan), stored into the kernel-object cache
    `cache` under that key when given (CPU work: no GPU is needed to fill a cache)."""
    from kir.replay import compile_variant, resolve, variant_jit_key
    resolved = resolve(record, variant)
    out = {"description": variant.describe(), "grid": list(resolved.grid), "block": list(resolved.block),
           "shared_bytes": resolved.shared_bytes, "compiled": resolved.specialization is not None,
           "warmup": variant.warmup, "repeat": variant.repeat}
    if resolved.specialization is not None:
        compiled = compile_variant(record, resolved, arch)
        out["jit_key"] = variant_jit_key(record, resolved, arch)
        out["compile"] = compiled.summary()
        if cache is not None:
            from kir.cache import Cache
            Cache(str(cache)).store(out["jit_key"], compiled.code, compiled.kind, compiled.arch, compiled.meta)
            out["stored"] = str(cache)
    return out


def describe_result(result) -> str:
    """The variant's line of `kir replay`'s text report."""
    r = result.resources
    code = f"{result.code_kind} compiled by kir.jit in {result.compile_seconds:.2f} s" if result.compiled and \
        result.compile_seconds is not None else f"{result.code_kind} (recorded)"
    parts = [f"variant: {result.description}; {code}, {result.code_size} bytes"]
    if result.jit_key:
        parts.append(f"jit key {result.jit_key}")
    if r is not None:
        parts.append(f"registers {r.registers}, spills {r.spill_stores}/{r.spill_loads} B, "
                     f"shared {r.shared_bytes} B, local {r.local_bytes} B")
    return "; ".join(parts)


def describe_variant(v: dict) -> list[str]:
    lines = [f"variant   {v['description']}",
             f"launch    grid {','.join(map(str, v['grid']))}  block {','.join(map(str, v['block']))}  "
             f"shared {v['shared_bytes']} B  (warm-up {v['warmup']}, repeat {v['repeat']})"]
    if not v["compiled"]:
        lines.append("code      the recorded code (nothing to compile)")
        return lines
    c = v["compile"]
    r = c["resources"]
    spec = c["specialized"]
    lines.append(f"jit key   {v['jit_key']}")
    lines.append(f"compile   kir.jit {c['kind']} for {c['arch']}: {c['size']} bytes in {c['compile_seconds']:.2f} s; "
                 f"args [{' '.join(spec['args'])}], dims replaced {spec['dims_replaced']}, bounds {spec['bounds']}")
    lines.append(f"resources registers {r.get('registers')}  spills {r.get('spill_stores')}/{r.get('spill_loads')} B  "
                 f"shared {r.get('shared_bytes')} B  local {r.get('local_bytes')} B  code {r.get('code_bytes')} B")
    lines.append("config    " + " ".join(f"{k}={v}" for k, v in c["config"].items()))
    if "stored" in v:
        lines.append(f"stored    in {v['stored']} under the JIT key")
    return lines


def print_variant_plan(p, variant_plan: dict, as_json: bool) -> None:
    if as_json:
        out = p.to_json()
        out["variant"] = variant_plan
        print(json.dumps(out))
    else:
        print(p.describe())
        print("\n".join(describe_variant(variant_plan)))


__all__ = ["add_variant_arguments", "describe_result", "describe_variant", "plan_variant",
           "print_variant_plan", "VariantOptions"]
