"""Compiling a kernel from its LLVM IR, specialized (docs/jit.md)::

    import kir.jit
    compiled = kir.jit.compile(bitcode, "_Z5daxpydPKdPdi", "sm_90",
                               specialize={"args": [(1, "f64", 2.5)], "block": (256, 1, 1),
                                           "bounds": (256, 2)},
                               options={"opt_level": 3})
    compiled.code            # the cubin (or PTX with options={"kind": "ptx"})
    compiled.resources       # registers, spills, shared / local / constant memory
    kir.jit.key_inputs(compiled)   # what kir.hashing.jit_key takes
    kir.jit.store(compiled, "cache-dir")   # into a kir.cache.Cache under the JIT key

For an AMD GPU the arch is a ROCm target-id and the code an AMDGPU code object
(kind "code-object", kir/jit/amdgpu.py): kir.jit.compile(hip_ir, "scale", "gfx90a:xnack+").

`kir jit compile BINARY --kernel K --arg 1:f64:2.5 ...` does the same for a
kernel whose IR a binary holds (the IR the Proteus pass embeds, or bitcode).
"""
from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from kir.errors import KirError, LLVMCrashError, OptionError
from kir.jit import amdgpu, codegen, libdevice, pipeline, transform
from kir.jit.codegen import Resources
from kir.jit.transform import TransformReport
from kir.jit.values import ArgValue, Specialization

__all__ = ["ArgValue", "CompiledKernel", "Options", "own_globals_refusal", "pick_assembler", "Resources", "Specialization",
           "TransformReport", "compile", "for_target", "jit_key", "key_inputs", "store"]

KINDS = ("cubin", "ptx", "code-object")  #: code-object: an AMDGPU code object (arch gfx...)
ASSEMBLERS = ("auto", "nvjitlink", "ptxas")


@dataclass
class Options:
    """How to compile.

    - opt_level: 0-3, LLVM's default<ON> pipeline (ignored when `pipeline` is given);
    - pipeline: an explicit new-pass-manager pipeline (kir/jit/pipeline.py);
    - codegen_opt: the back end's optimization level (default: opt_level);
    - ptx_version: e.g. 80 for PTX ISA 8.0 (default: the IR's +ptxNN, else LLVM's
      default for the arch);
    - features: more LLVM target features ("+ptx85,...");
    - kind: "cubin" or "ptx" (the driver's own PTX JIT assembles it at load, and
      caches it);
    - assembler: "auto" (the fastest at hand: ptxas until nvJitLink
      has started in the background, nvJitLink after, `pick_assembler`),
      "nvjitlink" or "ptxas";
    - assembler_options: ptxas options
      (nvJitLink gets each as -Xptxas=OPTION), e.g. ("-O3", "--maxrregcount=32");
    - keep_other_kernels: keep the module's other kernels as kernels (default:
      only the specialized kernel is an entry; the others are dropped, as the
      module Proteus compiles holds just the kernel and what it calls);
    - fp_contract: floating-point contraction (a*b+c as one fma): "fast" (the back
      end may fuse any multiply and add: clang's CUDA default, -ffp-contract=fast),
      "on" (only where the IR allows it: llvm.fmuladd and `contract` operations,
      LLVM's FPOpFusion::Standard), "off" (never: bit-identical with an AOT
      -ffp-contract=off build) or "auto" (default: what the app was built with, as
      the kernel's IR tells, kir.jit.transform.fp_contract_of);
    - device_libs: AMDGPU only, the ROCm device libraries' directory (default: the
      first of $HIP_DEVICE_LIB_PATH, $ROCM_PATH/amdgcn/bitcode, /opt/rocm/amdgcn/bitcode,
      Debian's /usr/lib/<multiarch>/amdgcn/bitcode that has them)."""
    opt_level: int = 3
    pipeline: str | None = None
    codegen_opt: int | None = None
    ptx_version: int | None = None
    features: str = ""
    kind: str = "cubin"
    assembler: str = "auto"
    assembler_options: tuple[str, ...] = ()
    keep_other_kernels: bool = False
    fp_contract: str = "auto"
    #: AMDGPU: the directory of the ROCm device libraries (ocml.bc, ...), as clang's
    #: --rocm-device-lib-path; None: looked for (kir/jit/amdgpu.py, library_dirs).
    #: Where they are is not in the key (as libdevice's path is not)
    device_libs: str | None = None

    def __post_init__(self) -> None:
        for name in ("opt_level", "codegen_opt"):
            value = getattr(self, name)
            if value is None and name == "codegen_opt":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 3:
                raise OptionError(f"{name} {value!r}: expected 0, 1, 2 or 3")
        if self.pipeline is not None:
            pipeline.parse(self.pipeline)  # bad text is an OptionError now, not mid-compile
        if self.ptx_version is not None and (isinstance(self.ptx_version, bool) or
                                             not isinstance(self.ptx_version, int) or
                                             not 10 <= self.ptx_version <= 999):
            raise OptionError(f"ptx_version {self.ptx_version!r}: expected e.g. 80 for PTX ISA 8.0")
        if self.kind not in KINDS:
            raise OptionError(f"kind {self.kind!r}: expected {' or '.join(KINDS)}")
        if self.assembler not in ASSEMBLERS:
            raise OptionError(f"assembler {self.assembler!r}: expected {', '.join(ASSEMBLERS)}")
        if isinstance(self.assembler_options, str):
            self.assembler_options = tuple(self.assembler_options.split())
        self.assembler_options = tuple(self.assembler_options)
        if self.fp_contract not in transform.FP_CONTRACT:
            raise OptionError(f"fp_contract {self.fp_contract!r}: expected {', '.join(transform.FP_CONTRACT)}")
        if self.device_libs is not None and not isinstance(self.device_libs, str):
            raise OptionError(f"device_libs {self.device_libs!r}: expected a directory")
        if not isinstance(self.features, str):
            raise OptionError(f"features {self.features!r}: expected text such as '+ptx85'")

    @classmethod
    def coerce(cls, value) -> "Options":
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            known = set(cls.__dataclass_fields__)
            unknown = set(value) - known
            if unknown:
                raise OptionError(f"options: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                                  f"expected {', '.join(sorted(known))}")
            return cls(**value)
        raise OptionError(f"options: expected an Options or a dict, not {type(value).__name__}")

    def config(self) -> list[tuple[str, bytes]]:
        """The JIT key's CONFIG records, in a fixed order: the options as asked
        (defaults included), everything that changes the code but not which
        assembler made it. What is derived from the IR (the PTX version it names)
        is covered by the static hash, so a JIT client computing the key at a
        launch needs only these options (docs/jit.md)."""
        items = [("pipeline", self.pipeline.encode()) if self.pipeline is not None
                 else ("opt", str(self.opt_level).encode()),
                 ("codegen-opt", str(self.codegen_opt if self.codegen_opt is not None
                                     else self.opt_level).encode()),
                 ("ptx", str(self.ptx_version or "").encode()),
                 ("features", self.features.encode()),
                 ("kind", self.kind.encode()),
                 ("assembler-options", " ".join(self.assembler_options).encode()),
                 ("kernels", b"all" if self.keep_other_kernels else b"one"),
                 ("fp-contract", self.fp_contract.encode())]
        return items


@dataclass
class CompiledKernel:
    """A specialized kernel, compiled."""
    code: bytes            #: the cubin, the PTX text (kind "ptx"), or the AMDGPU code object (kind "code-object")
    kind: str              #: "cubin", "ptx" or "code-object"
    arch: str              #: "sm_90", or an AMDGPU target-id "gfx90a:xnack+"
    entry: str             #: the kernel's name in the code (its mangled name)
    ptx: str               #: the PTX, also when kind is "cubin"
    resources: Resources
    compile_seconds: float
    options: Options
    specialization: Specialization
    static_hash: str | None  #: the kernel's static hash (32 hex digits), when known
    ptx_version: int | None = None
    timings: dict[str, float] = field(default_factory=dict)  #: seconds per step
    transform: TransformReport = field(default_factory=TransformReport)
    #: device global variables the compiled code defines (after optimization): its
    #: own copies, not the running program's (Proteus relinks them; kir.jit does not)
    device_globals: list[str] = field(default_factory=list)
    #: the contraction the code was compiled with ("auto" resolved from the IR)
    fp_contract: str = ""
    #: AMDGPU: the ISA as LLVM's back end prints it (the code object's machine code)
    assembly: str = ""

    @property
    def config(self) -> list[tuple[str, bytes]]:
        return self.options.config()

    @property
    def meta(self) -> dict[str, str]:
        """Cache metadata (all strings): key inputs, compile options, resources,
        producer and version."""
        import llvmlite
        import llvmlite.binding as llvm

        from kir import __version__
        out = {"producer": "kir.jit", "version": __version__,
               "llvm": ".".join(map(str, llvm.llvm_version_info)), "llvmlite": llvmlite.__version__,
               "kernel": self.entry, "arch": self.arch, "kind": self.kind,
               "ptx_version": str(self.ptx_version or ""),
               "compile_seconds": f"{self.compile_seconds:.6f}"}
        if self.static_hash:
            out["static_hash"] = self.static_hash
        for key, value in self.config:
            out[f"config.{key}"] = value.decode()
        out["assembler"] = self.resources.tool or "none"
        out["device_globals"] = " ".join(self.device_globals)
        out["fp_contract"] = self.fp_contract
        out.update({f"specialize.{k}": v for k, v in self.specialization.meta().items()})
        out.update(self.resources.meta())
        return out

    def summary(self) -> dict:
        """JSON-ready description (`kir jit compile --json`)."""
        r = asdict(self.resources)
        r.pop("log")
        return {"kernel": self.entry, "arch": self.arch, "kind": self.kind, "size": len(self.code),
                "static_hash": self.static_hash, "compile_seconds": self.compile_seconds,
                "timings": self.timings, "resources": r,
                "specialized": {"args": [a.text() for a in self.specialization.args],
                                "grid": self.specialization.grid, "block": self.specialization.block,
                                "bounds": self.specialization.bounds,
                                "dims_replaced": self.transform.replaced_dims,
                                "kernels_dropped": self.transform.dropped_kernels},
                "config": {k: v.decode() for k, v in self.config}, "fp_contract": self.fp_contract,
                "device_globals": self.device_globals}


def _read(module):
    """The llvmlite module of bitcode or IR text (bytes or str)."""
    import llvmlite.binding as llvm
    if _is_bitcode(module):
        from kir.ir import parse_bitcode
        return parse_bitcode(module, "the module")
    try:
        return llvm.parse_assembly(module.decode() if isinstance(module, bytes) else module)
    except (RuntimeError, UnicodeDecodeError) as error:
        raise KirError(f"llvmlite (LLVM {'.'.join(map(str, llvm.llvm_version_info))}) cannot read "
                       f"the module: {str(error).strip()}") from None


def _ptx_from_ir(module, kernel: str) -> int | None:
    import re
    try:
        fn = module.get_function(kernel)
    except NameError:
        return None
    text = " ".join(a.decode(errors="replace") for a in fn.attributes)
    found = re.search(r"\+ptx(\d+)", text)
    return int(found[1]) if found else None


def compile(module, kernel: str, arch: str = "sm_90", specialize=None, options=None, *,  # noqa: A001
            static_hash: str | None = None) -> CompiledKernel:
    """Specialize `kernel` of `module` (LLVM bitcode or IR text as bytes/str, or an
    llvmlite module, which is not changed) and compile it for `arch`.

    specialize: a Specialization or a dict of its fields; options: an Options or a
    dict of its fields. static_hash: the kernel's static hash (kir.hashing) for
    the JIT key; computed from the bitcode when `module` is one module's bitcode
    (the hash `kir hash` gives a kernel whose IR is that one module)."""
    if amdgpu.is_amdgpu(arch):
        amdgpu.parse_target_id(arch)  # an OptionError now for a malformed target-id
    else:
        arch = codegen.check_arch(arch)
    spec = Specialization.coerce(specialize)
    opts = Options.coerce(options)
    opts = for_target(opts, arch)
    if not isinstance(kernel, str) or not kernel:
        raise OptionError(f"kernel {kernel!r}: expected the kernel's (mangled) name")
    given_bitcode = isinstance(module, (bytes, bytearray, memoryview)) and _is_bitcode(bytes(module))
    module = _portable(module)
    if static_hash is None and given_bitcode:
        from kir import _core
        static_hash = _core.static_hash(kernel, "ir", [module]).hex
    from kir import _irworker
    try:  # LLVM may end the process on IR it cannot compile: kir's worker runs it (kir/_irworker.py)
        return _irworker.call("kir.jit:_compile", module, kernel, arch, spec, opts, static_hash)
    except LLVMCrashError as died:
        raise LLVMCrashError(f"{died} compiling {kernel} for {arch}") from None


def for_target(opts: Options, arch: str) -> Options:
    """The options as they apply to `arch`: for AMDGPU (gfx...) the default kind
    "cubin" is "code-object" (a code object), and PTX options are refused. What the
    code is compiled with, so what its JIT key's CONFIG records say (`kind`
    "code-object" on AMD GPUs: kir.replay.variant.jit_key, the tuner's hand-off)."""
    from dataclasses import replace
    if amdgpu.is_amdgpu(arch):
        if opts.kind == "ptx" or opts.ptx_version is not None or opts.assembler_options:
            raise OptionError(f"{arch} is an AMDGPU target: PTX, ptx_version and ptxas options are NVIDIA's "
                              "(the code is an AMDGPU code object, kind 'code-object')")
        return replace(opts, kind="code-object") if opts.kind == "cubin" else opts
    if opts.kind == "code-object":
        raise OptionError(f"kind 'code-object' is an AMDGPU code object: give an AMDGPU arch (gfx942, ...), not {arch}")
    return opts


def _portable(module):
    """`module` as what reaches the worker: bitcode or text (bytes or str); an
    llvmlite module as its bitcode."""
    if isinstance(module, (bytes, bytearray, memoryview)):
        return bytes(module)
    if isinstance(module, str):
        return module
    import llvmlite.binding as llvm
    if isinstance(module, llvm.ModuleRef):
        return module.as_bitcode()
    raise OptionError(f"module: expected LLVM bitcode (bytes), IR text or an llvmlite module, not "
                      f"{type(module).__name__}")


def _is_bitcode(data) -> bool:
    return isinstance(data, bytes) and (data[:2] == b"BC" or data[:4] == b"\xde\xc0\x17\x0b")


def _compile(module, kernel: str, arch: str, spec: Specialization, opts: Options,
             static_hash: str | None) -> CompiledKernel:
    """`compile`, in kir's LLVM worker."""
    started = time.perf_counter()
    parsed = _read(module)
    if amdgpu.is_amdgpu(arch):
        return _compile_amdgpu(parsed, kernel, arch, spec, opts, static_hash, started)
    if parsed.triple and not parsed.triple.startswith("nvptx"):
        raise OptionError(f"the module is for {parsed.triple}: kir.jit compiles NVPTX modules")
    timings = {}

    step = time.perf_counter()
    contract = opts.fp_contract if opts.fp_contract != "auto" else transform.fp_contract_of(str(parsed))
    ptx_version = opts.ptx_version or _ptx_from_ir(parsed, kernel)
    specialized, report = transform.specialize(parsed, kernel, spec, arch, ptx_version,
                                               opts.keep_other_kernels)
    if not specialized.triple:
        specialized.triple = codegen.NVPTX_TRIPLE
    calls = libdevice.called(specialized)
    if calls:
        libdevice.link(specialized, libdevice.find(calls))
    features = ",".join(f for f in ([f"+ptx{ptx_version}"] if ptx_version else []) +
                        [f for f in opts.features.split(",") if f])
    machine = codegen.target_machine(arch, features,
                                     opts.codegen_opt if opts.codegen_opt is not None else opts.opt_level)
    specialized = _uncontracted(specialized, contract, kernel)
    pipeline.cleanup(specialized, machine)
    timings["specialize"] = time.perf_counter() - step

    _optimize(specialized, machine, opts, timings)
    device_globals = _used_globals(specialized)

    step = time.perf_counter()
    ptx = codegen.emit_ptx(specialized, machine, contract)
    timings["codegen"] = time.perf_counter() - step
    if f".entry {kernel}(" not in ptx:
        raise KirError(f"the PTX has no entry {kernel} (a bug in kir's transform, please report it)")

    resources = Resources()
    if opts.kind == "ptx":
        code = ptx.encode()
    else:
        step = time.perf_counter()
        code = _assemble(ptx, arch, opts, kernel, resources)
        timings["assemble"] = time.perf_counter() - step
    return CompiledKernel(code=code, kind=opts.kind, arch=arch, entry=kernel, ptx=ptx,
                          resources=resources, compile_seconds=time.perf_counter() - started,
                          options=opts, specialization=spec, static_hash=static_hash,
                          ptx_version=ptx_version, timings=timings, transform=report,
                          device_globals=device_globals, fp_contract=contract)


def _compile_amdgpu(parsed, kernel: str, arch: str, spec: Specialization, opts: Options,
                    static_hash: str | None, started: float) -> CompiledKernel:
    """`_compile` for an AMDGPU target-id: the same transform and pipeline, then
    LLVM's AMDGPU back end writes an object and ld.lld links the code object
    (kir/jit/amdgpu.py)."""
    if parsed.triple and not parsed.triple.startswith("amdgcn"):
        raise OptionError(f"the module is for {parsed.triple}: {arch} needs an amdgcn-amd-amdhsa module "
                          "(HIP device IR: clang -x hip --cuda-device-only -emit-llvm)")
    timings = {}
    step = time.perf_counter()
    contract = opts.fp_contract if opts.fp_contract != "auto" else transform.fp_contract_of(str(parsed))
    specialized, report = transform.specialize(parsed, kernel, spec, arch, None, opts.keep_other_kernels)
    if not specialized.triple:
        specialized.triple = amdgpu.AMDGPU_TRIPLE
    machine = amdgpu.target_machine(arch, opts.features,
                                    opts.codegen_opt if opts.codegen_opt is not None else opts.opt_level)
    specialized = _uncontracted(specialized, contract, kernel)
    pipeline.cleanup(specialized, machine)
    # after the cleanup: a device-library function whose every call was folded (a
    # specialized dim) is no longer declared, and needs no library
    cpu, _ = amdgpu.parse_target_id(arch)
    calls = amdgpu.called(specialized)
    if calls:
        kernel_features = " ".join(a.decode(errors="replace") for a in specialized.get_function(kernel).attributes)
        libraries = amdgpu.find_libraries(cpu, amdgpu.wave64(cpu, kernel_features + "," + opts.features),
                                          amdgpu.code_object_version(specialized), calls, opts.device_libs)
        amdgpu.link_libraries(specialized, libraries)
    timings["specialize"] = time.perf_counter() - step

    _optimize(specialized, machine, opts, timings)
    device_globals = _used_globals(specialized)
    undefined = amdgpu.called(specialized)
    if undefined:
        raise KirError(f"after linking the device libraries the module still calls {', '.join(undefined)}")

    step = time.perf_counter()
    assembly = machine.emit_assembly(specialized.clone())
    obj = amdgpu.emit_object(specialized, machine)
    timings["codegen"] = time.perf_counter() - step
    step = time.perf_counter()
    code, tool = amdgpu.link(obj)
    timings["link"] = time.perf_counter() - step
    resources = Resources(tool=tool)
    from kir import parse_code_object
    found = next((k for k in parse_code_object(code).kernels if k.name == kernel), None)
    if found is None:
        raise KirError(f"the code object has no kernel {kernel} (a bug in kir's transform, please report it)")
    resources.registers, resources.shared_bytes = found.registers, found.shared_bytes
    resources.stack_frame, resources.code_bytes = found.frame_bytes, found.code_bytes
    resources.max_threads = list(found.max_threads) if found.max_threads else None
    return CompiledKernel(code=code, kind=opts.kind, arch=arch, entry=kernel, ptx="", resources=resources,
                          compile_seconds=time.perf_counter() - started, options=opts, specialization=spec,
                          static_hash=static_hash, timings=timings, transform=report,
                          device_globals=device_globals, fp_contract=contract, assembly=assembly)


def _uncontracted(module, contract: str, kernel: str):
    """`module` without `contract` flags when contraction is "off" (else as it is)."""
    if contract != "off":
        return module
    text, changed = transform.strip_contraction(str(module))
    return transform.parse_verified(text, kernel) if changed else module


def _optimize(module, machine, opts: Options, timings: dict) -> None:
    """The optimization pipeline (`opts.pipeline`, else default<O`opt_level`>) over `module`,
    its seconds in timings["optimize"]."""
    step = time.perf_counter()
    stages = pipeline.parse(opts.pipeline) if opts.pipeline is not None else [("default", opts.opt_level)]
    pipeline.run(module, machine, stages)
    timings["optimize"] = time.perf_counter() - step


def own_globals_refusal(compiled: CompiledKernel) -> str | None:
    """Why `compiled` must not run in place of the app's kernel, or None: code that
    holds its own copies of device globals (`device_globals`) would read and write
    those, not the running program's variables (kir.jit does not relink them as
    Proteus does: docs/jit.md, "Relinking device globals"). What the compile service
    and the tuner's hand-off check before they store code for a client."""
    if not compiled.device_globals:
        return None
    return (f"the compiled code holds its own copies of the device globals {', '.join(compiled.device_globals)} "
            "(kir.jit does not relink them to the program's), so in the app it would not see the program's "
            "values: not stored")


def _used_globals(module) -> list[str]:
    """The device global variables (not kir's private constants) the module's
    functions refer to."""
    import re

    import llvmlite.binding as llvm
    bodies = "\n".join(re.findall(r"^define [^\n]*\{\n(.*?)^\}", str(module), re.M | re.S))
    found = []
    for g in module.global_variables:
        if g.is_declaration or g.name.startswith("llvm.") or g.linkage == llvm.Linkage.private:
            continue
        if re.search(re.escape(transform.symbol(g.name)) + r"(?![-\w.$])", bodies):
            found.append(g.name)
    return sorted(found)


def pick_assembler(asked: str, nvjitlink_warm: bool, ptxas_found: bool) -> str:
    """What `assembler` "auto" uses (docs/jit.md, "Compile latency"). On the H200 host
    a process's first nvJitLink call costs ~200 ms (the library's start, after ~100 ms
    importing it), later ones 0.3-8 ms; a ptxas process 17-37 ms for one kernel. So:
    ptxas until nvJitLink is warm in this process (kir's LLVM worker warms it in the
    background at its first cubin, `warm_nvjitlink`), nvJitLink after; nvJitLink when
    ptxas is not found."""
    if asked != "auto":
        return asked
    return "nvjitlink" if nvjitlink_warm or not ptxas_found else "ptxas"


_warm = threading.Event()
_warming: list = []


def warm_nvjitlink(ptx: str, arch: str) -> None:
    """Start nvJitLink in a background thread (once per process): it assembles an
    empty kernel with `ptx`'s header, then `_warm` is set."""
    if _warming:
        return
    header = "\n".join(line for line in ptx.splitlines() if line.startswith((".version", ".target", ".address_size")))

    def start() -> None:
        link = codegen.nvjitlink_module()
        if link is None:
            return
        try:
            codegen.nvjitlink(header + "\n.visible .entry kir_warm()\n{\n\tret;\n}\n", arch, [], link)
            _warm.set()
        except KirError:
            pass
    thread = threading.Thread(target=start, name="kir-nvjitlink-warm", daemon=True)
    _warming.append(thread)
    thread.start()


def _assemble(ptx: str, arch: str, opts: Options, kernel: str, resources: Resources) -> bytes:
    ptxas_found = codegen.find_ptxas() is not None
    chosen = pick_assembler(opts.assembler, _warm.is_set(), ptxas_found)
    if opts.assembler == "auto" and ptxas_found:
        warm_nvjitlink(ptx, arch)
    link = codegen.nvjitlink_module() if chosen == "nvjitlink" else None
    if opts.assembler == "nvjitlink" and link is None:
        raise codegen.nvjitlink_missing("assembler 'nvjitlink' (else use 'ptxas' or 'auto')")
    if link is not None:
        cubin, log, tool = codegen.nvjitlink(ptx, arch, [f"-Xptxas={o}" for o in opts.assembler_options],
                                             link)
    else:
        cubin, log, tool = codegen.ptxas(ptx, arch, list(opts.assembler_options))
    resources.tool, resources.log = tool, log
    codegen.parse_info_log(log, kernel, resources)
    codegen.from_cubin(cubin, kernel, resources)
    return cubin


def key_inputs(compiled: CompiledKernel) -> dict:
    """The keyword arguments of `kir.hashing.jit_key` for this compiled kernel:
    static_hash, arch, args [(position, kir_arg_type, bytes)], grid, block,
    shared_bytes, bounds, config [(key, bytes)], captures [(lambda, slot, offset,
    kir_arg_type, bytes)]. Each value is encoded as kir_jit_key encodes it
    (docs/hashing.md): an array's ARG record names its element type
    (ArgValue.key_type), whatever form it was specialized in."""
    if not compiled.static_hash:
        raise KirError(f"the static hash of {compiled.entry} is not known: pass static_hash= to "
                       "kir.jit.compile (kir.hashing gives it for a binary's kernels)")
    s = compiled.specialization
    return {"static_hash": compiled.static_hash, "arch": compiled.arch,
            "args": [(a.position, a.key_type_code, a.value) for a in s.args],
            "grid": s.grid, "block": s.block, "shared_bytes": s.shared_bytes, "bounds": s.bounds,
            "config": compiled.config, "captures": list(s.captures)}


def jit_key(compiled: CompiledKernel) -> str:
    """The JIT key (32 hex digits) under which `compiled` is cached."""
    from kir import hashing
    if not hasattr(hashing, "jit_key"):
        raise KirError("this kir has no kir.hashing.jit_key (the JIT key, issue 12 §2)")
    return hashing.jit_key(**key_inputs(compiled))


def store(compiled: CompiledKernel, cache) -> str:
    """Store `compiled` in `cache` (a kir.cache.Cache or its directory) under its
    JIT key; returns the key."""
    try:
        from kir import cache as cache_module
    except ImportError:
        raise KirError("this kir has no kir.cache (the kernel-object cache, issue 12 §3)") from None
    key = jit_key(compiled)
    target = cache if hasattr(cache, "store") else cache_module.Cache(str(cache))
    target.store(key, compiled.code, compiled.kind, compiled.arch, compiled.meta)
    return key
