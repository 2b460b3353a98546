"""`kir jit compile BINARY --kernel K --arch sm_90 --arg 1:f64:2.5 ...`: compile a
kernel from the LLVM IR its binary holds (the IR the Proteus pass embeds, or
bitcode), specialized for runtime constants, dims and launch bounds
(kir.jit.compile, docs/jit.md); write the cubin / PTX (-o) and/or store it in a
kernel-object cache under its JIT key (--cache, when this kir has kir.cache)."""
from __future__ import annotations

import json
import sys

from kir.envelope import add_json_argument, envelope
from kir.errors import KirError, LLVMCrashError, OptionError
from kir.kernel_pattern import kernel_pattern
from kir.words import plural

SCHEMA = "kir.jit-compile/1"  # `kir jit compile --json`


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="jit_command", required=True, metavar="VERB")
    c = sub.add_parser("compile", help="compile a kernel from its IR, specialized",
                       description="Compile a kernel from the LLVM IR a binary holds, specialized for "
                                   "runtime-constant arguments, grid/block dimensions and launch bounds.")
    c.add_argument("binary", metavar="BINARY")
    c.add_argument("--kernel", required=True, metavar="NAME|REGEX",
                   help="the kernel: its mangled name, or a regular expression matching exactly one "
                        "kernel with IR (mangled or demangled name)")
    c.add_argument("--arch", default="sm_90",
                   help="target architecture (default sm_90), or an AMDGPU target-id: gfx942, gfx90a:xnack+, ...")
    c.add_argument("--arg", action="append", default=[], metavar="POS:TYPE:VALUE",
                   help="a runtime-constant argument (1-based position), e.g. 1:f64:2.5, 4:i32:7, "
                        "2:ptr:0x7f0000001000, 3:bytes:0000803f (an object or array); repeatable")
    c.add_argument("--grid", metavar="X,Y,Z", help="grid dimensions: reads of %%nctaid become constants")
    c.add_argument("--block", metavar="X,Y,Z", help="block dimensions: reads of %%ntid become constants")
    c.add_argument("--bounds", metavar="MAXT[,MINB]",
                   help="launch bounds: max threads per block, min blocks per multiprocessor")
    c.add_argument("--shared-bytes", type=int, default=0, metavar="N",
                   help="the launch's dynamic shared memory (part of the JIT key only)")
    level = c.add_mutually_exclusive_group()
    level.add_argument("-O", dest="opt", type=int, choices=range(4), metavar="0-3",
                       help="optimization level (default 3)")
    level.add_argument("--pipeline", metavar="TEXT",
                       help="an explicit new-pass-manager pipeline, e.g. 'default<O2>,globaldce'")
    c.add_argument("--codegen-opt", type=int, choices=range(4), metavar="0-3",
                   help="back-end optimization level (default: the -O level)")
    c.add_argument("--ptx-version", type=int, metavar="NN", help="PTX ISA version, e.g. 80 (default: the IR's)")
    c.add_argument("--features", default="", metavar="LIST", help="more LLVM target features, e.g. +ptx85")
    c.add_argument("--ptx", action="store_true", help="produce PTX instead of a cubin")
    c.add_argument("--assembler", choices=("auto", "nvjitlink", "ptxas"), default="auto",
                   help="what turns PTX into a cubin (default: nvJitLink when it loads, else ptxas)")
    c.add_argument("--ptxas-option", action="append", default=[], metavar="OPT",
                   help="an option for ptxas (nvJitLink: -Xptxas=OPT), e.g. --ptxas-option=--maxrregcount=32")
    c.add_argument("--keep-other-kernels", action="store_true",
                   help="keep the module's other kernels (default: only this kernel is an entry)")
    c.add_argument("--fp-contract", choices=("auto", "fast", "on", "off"), default="auto",
                   help="floating-point contraction: fast (any a*b+c may become an fma), on (where the IR "
                        "allows it), off (never: as -ffp-contract=off), auto (default: what the IR was built with)")
    c.add_argument("--cache", metavar="DIR", help="store the result in this kernel-object cache")
    c.add_argument("-o", "--output", metavar="FILE", help="write the cubin / PTX / AMDGPU code object here")
    add_json_argument(c, help="print one JSON object")


def run(args) -> int:
    if args.jit_command == "compile":
        return compile_command(args)
    raise OptionError(f"unknown jit verb {args.jit_command!r}")  # argparse rejects it first


def _dims(text: str | None, option: str) -> tuple[int, int, int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if not 1 <= len(parts) <= 3 or not all(p.strip().isdigit() for p in parts):
        raise OptionError(f"{option} {text!r}: expected X[,Y[,Z]], positive integers")
    values = [int(p) for p in parts] + [1] * (3 - len(parts))
    if not all(1 <= v <= 0xFFFFFFFF for v in values):
        raise OptionError(f"{option} {text!r}: each dimension must be in 1..4294967295")
    return tuple(values)  # type: ignore[return-value]


def _bounds(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    parts = text.split(",")
    if not 1 <= len(parts) <= 2 or not all(p.strip().isdigit() for p in parts):
        raise OptionError(f"--bounds {text!r}: expected MAX_THREADS[,MIN_BLOCKS], integers")
    values = [int(p) for p in parts] + [0] * (2 - len(parts))
    if not 1 <= values[0] <= 1024:
        raise OptionError(f"--bounds {text!r}: max threads per block must be in 1..1024")
    return values[0], values[1]


def compile_command(args) -> int:
    import kir.jit as jit
    from kir.jit.values import ArgValue, Specialization

    spec = Specialization(args=[ArgValue.parse(text) for text in args.arg],
                          grid=_dims(args.grid, "--grid"), block=_dims(args.block, "--block"),
                          bounds=_bounds(args.bounds), shared_bytes=_shared(args.shared_bytes))
    options = jit.Options(opt_level=3 if args.opt is None else args.opt, pipeline=args.pipeline,
                          codegen_opt=args.codegen_opt, ptx_version=args.ptx_version,
                          features=args.features, kind="ptx" if args.ptx else "cubin",
                          assembler=args.assembler, assembler_options=tuple(args.ptxas_option),
                          keep_other_kernels=args.keep_other_kernels, fp_contract=args.fp_contract)
    from kir.jit import amdgpu
    from kir.jit.codegen import check_arch
    if amdgpu.is_amdgpu(args.arch):
        amdgpu.parse_target_id(args.arch)
    else:
        check_arch(args.arch)
    if args.cache:
        _cache_support()
    found = find_kernel(args.binary, args.kernel, args.arch)
    try:
        compiled = jit.compile(found.module, found.kernel, args.arch, spec, options,
                               static_hash=found.static_hash)
    except LLVMCrashError as error:
        raise LLVMCrashError(f"{args.binary}: {found.source}: {error}") from None
    key = None
    if args.output:
        with open(args.output, "wb") as f:
            f.write(compiled.code)
    if args.cache:
        key = jit.store(compiled, args.cache)
    if args.json:
        out = envelope(SCHEMA, **compiled.summary())
        out.update({"source": found.source, "output": args.output, "cache": args.cache, "key": key})
        print(json.dumps(out))
    else:
        print_summary(compiled, found, args.output, args.cache, key)
    return 0


def _shared(value: int) -> int:
    if value < 0:
        raise OptionError(f"--shared-bytes {value}: expected a non-negative integer")
    return value


def _cache_support() -> None:
    from kir import hashing
    try:
        import kir.cache  # noqa: F401
    except ImportError:
        raise OptionError("--cache: this kir has no kernel-object cache (kir.cache)") from None
    if not hasattr(hashing, "jit_key"):
        raise OptionError("--cache: this kir has no JIT key (kir.hashing.jit_key)")


class FoundKernel:
    def __init__(self, kernel: str, module, static_hash: str, source: str, target: str) -> None:
        self.kernel, self.module, self.static_hash, self.source, self.target = \
            kernel, module, static_hash, source, target


def find_kernel(path: str, pattern: str, arch: str) -> FoundKernel:
    """The kernel `pattern` names in the binary at `path`, with its IR (one module's
    bitcode, or an llvmlite module linking several: an RDC kernel's) and static hash."""
    from kir.binary import Binary
    from kir.hashing import kernel_code, kernel_hashes
    from kir.ir import ir_modules, kernel_ir
    from kir.model import CodeKind

    binary = Binary.open(path)
    hashes, errors = kernel_hashes(binary)
    modules = ir_modules(binary)
    links = kernel_ir(binary, modules)
    images = {image.index: image for image in binary.images}
    with_ir, without_ir = [], set()
    for h in hashes:
        if h.code_kind is CodeKind.ir:
            code = images[h.image].code
            bitcode = [code.ir[m].bitcode for m in kernel_code(code, h.kernel).modules]
            with_ir.append((h, bitcode))
        elif (h.image, h.kernel) in links:
            with_ir.append((h, [modules[links[(h.image, h.kernel)]].bitcode]))
        else:
            without_ir.add(h.kernel)
    names = sorted({h.kernel for h, _ in with_ir})
    matched = [n for n in names if n == pattern]
    if not matched:
        regex = kernel_pattern(pattern)  # not a kernel name: a pattern (kir.kernel_pattern)
        matched = [n for n in names if regex.selects(n)]
    if not matched:
        plain = sorted(n for n in without_ir if n == pattern or regex.selects(n))
        if plain:
            raise OptionError(f"--kernel {pattern!r}: {', '.join(plain)} has no LLVM IR in {path} "
                              "(build it with the Proteus pass, or embed its bitcode)")
        listing = ", ".join(names) if names else "none"
        extra = f"; {plural(len(errors), 'image')} could not be read: {errors[0]}" if errors else ""
        unreadable = [m for m in modules if m.error]
        if unreadable:
            extra += f"; {plural(len(unreadable), 'IR module')} could not be read: {_named(unreadable[0])}"
        raise OptionError(f"--kernel {pattern!r}: no kernel with IR in {path} matches "
                          f"(kernels with IR: {listing}){extra}")
    if len(matched) > 1:
        raise OptionError(f"--kernel {pattern!r} matches {len(matched)} kernels: {', '.join(matched)}; "
                          "give one (its mangled name, or an anchored expression)")
    kernel = matched[0]
    choices = [(h, bitcode) for h, bitcode in with_ir if h.kernel == kernel]
    # The code the running program would load for `arch` (the hook's choice,
    # docs/hashing.md): an image of that arch, IR embedded in it first.
    choices.sort(key=lambda c: (c[0].target != arch, c[0].code_kind is not CodeKind.ir, c[0].image))
    h, bitcode = choices[0]
    for m in modules:
        if m.error and m.bitcode in bitcode:
            raise KirError(f"{path}: {_named(m)}")
    return FoundKernel(kernel, _link(bitcode, kernel), h.static_hash, h.source, h.target)


def _named(module) -> str:
    return f"IR module #{module.index} ({module.source}): {module.error}"


def _link(bitcode: list[bytes], kernel: str) -> bytes:
    """The kernel's modules linked into one (bitcode), in kir's LLVM worker."""
    if len(bitcode) == 1:
        return bitcode[0]
    from kir.ir import link_bitcode
    try:
        return link_bitcode(bitcode)
    except (KirError, RuntimeError) as error:
        raise KirError(f"the IR modules of {kernel} cannot be read or linked by llvmlite: "
                       f"{str(error).strip()}") from None


def print_summary(c, found: FoundKernel, output: str | None, cache: str | None, key: str | None) -> None:
    r = c.resources
    print(f"{c.entry}  {c.arch}  {c.kind} {len(c.code)} bytes  {c.compile_seconds:.3f} s")
    print(f"  static hash {c.static_hash}  ({found.source})")
    spec = c.specialization
    parts = [" ".join(a.text() for a in spec.args) or "no arguments"]
    if spec.grid:
        parts.append(f"grid {','.join(map(str, spec.grid))}")
    if spec.block:
        parts.append(f"block {','.join(map(str, spec.block))}")
    if spec.bounds:
        parts.append(f"bounds {','.join(map(str, spec.bounds))}")
    print(f"  specialized: {'; '.join(parts)}")
    print("  config: " + " ".join(f"{k}={v.decode()!r}" for k, v in c.config))
    if c.kind == "cubin":
        constants = " ".join(f"{k} {v}" for k, v in r.constant_bytes.items())
        print(f"  {r.tool}: registers {r.registers}, spill stores {r.spill_stores} / loads "
              f"{r.spill_loads} bytes, stack {r.stack_frame}, shared {r.shared_bytes}, local "
              f"{r.local_bytes}, {constants}, code {r.code_bytes} bytes")
    elif c.kind == "code-object":
        print(f"  {r.tool}: registers {r.registers}, stack {r.stack_frame}, shared {r.shared_bytes}, "
              f"code {r.code_bytes} bytes")
    if c.device_globals:
        print(f"  device globals: {', '.join(c.device_globals)} (the compiled code holds its own copies, "
              "not the program's)")
    if output:
        print(f"  wrote {output}")
    if key:
        print(f"  stored in {cache} under {key}")
    sys.stdout.flush()


__all__ = ["add_arguments", "compile_command", "find_kernel", "FoundKernel", "print_summary", "run", "SCHEMA"]
