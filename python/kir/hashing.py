"""Kernel hashes (docs/hashing.md): the static hash of every kernel of a binary,
the JIT key and the launch identity, and Proteus's current 64-bit hash for migration.

The encoding, XXH3 and the policy deciding which bytes a kernel's code is (the
IR embedded in its image, else the image) live in the core (libkir), so `kir
hash`, the hook layer, the recorder and the replay planner agree by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

from kir import _core
from kir.binary import Binary, kernel_static_hash
from kir.errors import KirError, OptionError, llvmlite_installed
from kir.model import CODE_IMAGES, ArgType, CodeKind, ImageKind, JitArg, JitArgKind, arg_type
from kir.proteus import proteus_static_hashes

Hash128 = _core.Hash128
DynamicHash = _core.DynamicHash
HashDomain = _core.HashDomain
static_hash = _core.static_hash
proteus_static_hash = _core.proteus_static_hash
xxh3_128 = _core.xxh3_128

kernel_code = _core.kernel_code


#: kir_jit_arg_kind (kir.model.JitArgKind)
SCALAR, ARRAY, OBJECT = JitArgKind.scalar, JitArgKind.array, JitArgKind.object
#: SPECIALIZE flags
SPECIALIZE_GRID, SPECIALIZE_BLOCK, SPECIALIZE_BOUNDS = 1, 2, 4


def _type(value) -> int:
    """A kir_arg_type number from a number, an ArgType or its name ("f32")."""
    try:
        kind = arg_type(value)
    except ValueError as error:
        raise OptionError(str(error)) from None
    if not isinstance(kind, ArgType):
        raise OptionError(f"argument type {kind} is not a kir_arg_type (1..{len(ArgType)})")
    return int(kind)


def _hex(static_hash) -> Hash128:
    return static_hash if isinstance(static_hash, Hash128) else Hash128.from_hex(static_hash)


def _c_string(text: str, what: str) -> str:
    if "\0" in text:
        raise OptionError(f"{what} {text!r} holds a NUL character (it is a C string in kir_jit_key_input)")
    return text


def _config(config) -> list[tuple[str, bytes]]:
    return [(_c_string(k, "config key"), bytes(v)) for k, v in config]


def _captures(captures) -> list:
    return [(_c_string(lam, "lambda name"), slot, offset, _type(t), bytes(v)) for lam, slot, offset, t, v in captures]


def _dims(value, name: str) -> tuple[int, int, int]:
    dims = tuple(value)
    if len(dims) != 3:
        raise OptionError(f"{name} must have 3 dimensions, not {len(dims)}")
    return dims


def jit_key(static_hash: str, arch: str, args, *, grid=None, block=None, shared_bytes: int = 0,
            bounds=None, config=(), captures=()) -> str:
    """The JIT key (docs/hashing.md): what a compiled object is valid for.

    `args`: the runtime-constant arguments as (1-based position, kir_arg_type, value
    bytes), arrays and objects already dereferenced (their elements' / the object's
    bytes), in any order; `grid` / `block`: the dimensions when the code is specialized
    for them (None: not); `bounds`: (max_threads, min_blocks) launch bounds, None or
    (0, 0) for none; `config`: (key, value bytes) CONFIG records in a fixed order;
    `captures`: (lambda, slot, offset, type, value bytes) lambda captures (keys and
    lambda names are C strings: no NUL character). Computed by
    kir_jit_key, the C API a JIT calls at each launch. 32 hex digits."""
    args = list(args)
    positions = [int(p) for p, _, _ in args]
    count = max(positions, default=0)
    params = [None] * count
    jit_args = []
    for (position, kind, value), p in zip(args, positions):
        if p < 1:
            raise OptionError(f"argument position {p}: positions are 1-based")
        if params[p - 1] is not None:
            raise OptionError(f"argument position {p} given twice")
        params[p - 1] = bytes(value)
        jit_args.append(JitArg(p, OBJECT, _type(kind), by_value=True, count=len(value)).c_fields())
    max_threads, min_blocks = bounds if bounds is not None else (0, 0)
    return _core.jit_key_of_launch(
        _hex(static_hash), arch, params, jit_args, {}, _dims(grid or (0, 0, 0), "grid"),
        _dims(block or (0, 0, 0), "block"), grid is not None, block is not None, shared_bytes,
        (max_threads, min_blocks), _config(config), _captures(captures),
        [len(p) if p is not None else 0 for p in params])


@dataclass(frozen=True)
class JitValue:
    """One runtime-constant argument's value as the JIT key hashed it (kir_jit_value,
    kir.h ABI 10): what a JIT client specializes on."""
    position: int      #: 1-based parameter position
    kind: int          #: kir_jit_arg_kind (0 scalar, 1 array, 2 object)
    type: int          #: kir_arg_type
    from_memory: bool  #: read through the pointer the argument holds (else the argument's own bytes)
    count: int         #: scalars 1; arrays their elements; objects their bytes
    value: bytes       #: the bytes hashed


def jit_key_of_launch(static_hash: str, arch: str, params, jit_args, *, memory=None,
                      grid=(1, 1, 1), block=(1, 1, 1), specialize_grid: bool = False,
                      specialize_block: bool = False, shared_bytes: int = 0, bounds=None,
                      config=(), captures=(), param_sizes=None, values: bool = False):
    """The JIT key of a launch as a JIT client computes it (kir_jit_key): `params`
    the launch's argument bytes (one per parameter), `jit_args` the kernel's
    runtime-constant arguments (kir.model.JitArg), `memory` {address: bytes} the device memory
    arrays and objects passed by pointer are read from. With `values`: (key, [JitValue]),
    the values the key hashed, by increasing position (each read from `memory` once)."""
    max_threads, min_blocks = bounds if bounds is not None else (0, 0)
    result = _core.jit_key_of_launch(
        _hex(static_hash), arch, [None if p is None else bytes(p) for p in params],
        [a.c_fields() if isinstance(a, JitArg) else tuple(a) for a in jit_args],
        dict(memory or {}), _dims(grid, "grid"), _dims(block, "block"), specialize_grid, specialize_block,
        shared_bytes, (max_threads, min_blocks), _config(config), _captures(captures), param_sizes, values)
    if not values:
        return result
    key, decoded = result
    return key, [JitValue(*v) for v in decoded]


def launch_identity(static_hash: str, arch: str, args, *, grid, block, shared_bytes: int = 0) -> str:
    """The launch identity (docs/hashing.md): what a recorder deduplicates launches
    on. `args`: every parameter's bytes, in order (None: left out, as the hook leaves
    out a parameter it has no pointer for). Computed by kir_launch_identity. 32 hex digits."""
    return _core.launch_identity_of(_hex(static_hash), arch, [None if a is None else bytes(a) for a in args],
                                    _dims(grid, "grid"), _dims(block, "block"), shared_bytes)


@dataclass
class KernelHash:
    """One kernel's static hash in one image. `static_hash` is 32 hex digits, the type
    and name every kir API uses for it (kir.record's Kernel.static_hash, kir.hook's
    Kernel.static_hash, `kir hash --json`'s "static"); `static` is the same hash as
    a Hash128 (its older name)."""
    image: int          #: index of the image the kernel was found in
    image_kind: ImageKind  #: that image's kind (cubin, ptx, code-object)
    target: str         #: the image's target ("sm_90", "gfx90a")
    kernel: str         #: mangled name
    static_hash: str    #: 32 hex digits
    code_kind: CodeKind    #: ir, or the image kind the code was hashed from
    source: str         #: "IR _jit_bitcode_… in cubin image #i" or "ptx image #i"
    proteus: int | None = None  #: Proteus's 64-bit hash (JIT kernels only, kir/proteus.py)
    #: An OpenMP target region's kernel: its region identity (32 hex digits; docs/hashing.md,
    #: "OpenMP target regions"), the same in every build of one source; None otherwise.
    omp_region: str | None = None

    @property
    def static(self) -> Hash128:
        """The static hash as a Hash128 (`static_hash` is its 32 hex digits)."""
        return Hash128.from_hex(self.static_hash)


def omp_region(name: str) -> _core.OmpRegionName | None:
    """The parts of an OpenMP target region's kernel name
    (`__omp_offloading_<device>_<file>_<parent>_l<line>[_<count>]`, LLVM's
    TargetRegionEntryInfo::getTargetRegionEntryFnName), `.normalized` the name with the
    device and file ids written as 0; None when `name` is not one."""
    return _core.parse_omp_region_name(name)


@dataclass
class OmpRegion:
    """One OpenMP target region found in a binary, with its region identity
    (docs/hashing.md, "OpenMP target regions")."""
    kernel: str       #: the kernel's name in this build (its device and file ids included)
    normalized: str   #: the name with the ids written 0: the same in every build
    identity: str     #: the region identity, 32 hex digits
    code_kind: str    #: "ir", or the kind of the device image it was hashed from ("cubin")
    image: int        #: the index of the image it lies in
    target: str       #: that image's target ("sm_90", "gfx90a")


def image_omp_region(kernel: str, image, data: bytes | None = None) -> str | None:
    """The region identity (32 hex digits) of OpenMP region kernel `kernel` hashed from
    device image `image` (kir.Image; `data`: its decoded bytes, when read already), or
    None when `kernel` is not a region's."""
    identity = _core.omp_region_identity_of_image(kernel, str(image.kind), image.read() if data is None else data)
    return identity.hex if identity is not None else None


def omp_regions(binary: Binary) -> list[OmpRegion]:
    """Every OpenMP target region of `binary`: each kernel defined in its LLVM IR modules
    (read with llvmlite, the `ir` extra; left out without it) and each kernel of its
    device images (cubins) whose name is a region's, once per (kernel, image), with its
    region identity."""
    out = []
    images = binary.images
    if llvmlite_installed() and any(i.kind is ImageKind.bitcode for i in images):
        from kir.ir import ir_modules
        for module in ir_modules(binary):
            for f in module.kernels:
                if f.omp_region and not f.is_declaration:
                    target = images[module.image].target if module.image >= 0 else ""
                    out.append(OmpRegion(f.name, _core.parse_omp_region_name(f.name).normalized, f.omp_region,
                                         "ir", module.image, target))
    hashes, _ = kernel_hashes(binary, name_filter=lambda name: name.startswith("__omp_offloading_"))
    out += [OmpRegion(h.kernel, _core.parse_omp_region_name(h.kernel).normalized, h.omp_region, str(h.image_kind),
                      h.image, h.target) for h in hashes if h.omp_region]
    return out


def static_hashes(binary: Binary, kernel: str | None = None) -> list[KernelHash]:
    """Every kernel's static hash in `binary` (each kernel once per image), as `kir hash`
    prints them: the common case of kernel_hashes. `kernel`: only kernels whose mangled or
    demangled name contains a match of this regular expression (kir's dialect, as
    `--kernel`). KirError when an image cannot be decoded (kernel_hashes collects those
    instead)."""
    selects = None
    if kernel is not None:
        from kir.kernel_pattern import kernel_pattern
        selects = kernel_pattern(kernel, "kernel").selects
    hashes, errors = kernel_hashes(binary, name_filter=selects)
    if errors:
        raise KirError(errors[0] + (f" (and {len(errors) - 1} more images)" if len(errors) > 1 else ""))
    return hashes


def kernel_hashes(binary: Binary, llvm20_or_newer: bool = True,
                  name_filter=None, progress=None) -> tuple[list[KernelHash], list[str]]:
    """The static hash of every kernel of every device image, once per (kernel,
    image), under libkir's one policy (kir/hash/kernel_code.hpp, docs/hashing.md),
    and the error messages of images that could not be decoded (their kernels
    are left out). `progress(done, total)` is called as images are decoded
    (Binary.load_code)."""
    images = [i for i in binary.images if i.kind in CODE_IMAGES and not i.obfuscated]
    errors = binary.load_code(images, digests=True, progress=progress)
    # Proteus's own hash reads the IR with llvmlite (kir/proteus.py): without the `ir` extra
    # it is left out (None); `kir hash --proteus` asks for the extra instead.
    proteus_hashes = proteus_static_hashes(binary, llvm20_or_newer) if llvmlite_installed() else {}
    out = []
    for image in images:
        code = image._code
        if code is None:
            continue
        image_bytes = None
        for kernel in code.kernels:
            if name_filter is not None and not name_filter(kernel.name):
                continue
            what = kernel_code(code, kernel.name)
            modules = [code.ir[m] for m in what.modules]
            where = f"{image.kind} image #{image.index}"
            source = f"IR {', '.join(m.name for m in modules)} in {where}" if modules else where
            region = None
            if kernel.name.startswith("__omp_offloading_"):
                image_bytes = image.read() if image_bytes is None else image_bytes
                region = image_omp_region(kernel.name, image, image_bytes)
            out.append(KernelHash(
                image=image.index, image_kind=image.kind, target=image.target, kernel=kernel.name,
                static_hash=_core.kernel_static_hash(code, kernel.name).hex, code_kind=what.kind, source=source,
                proteus=proteus_hashes.get((image.index, kernel.name)), omp_region=region))
    return out, errors


__all__ = ["ArgType", "ARRAY", "DynamicHash", "Hash128", "HashDomain", "jit_key", "jit_key_of_launch",
           "JitArg", "JitValue", "image_omp_region", "kernel_code", "kernel_hashes", "kernel_static_hash", "KernelHash", "launch_identity",
           "OBJECT", "omp_region", "omp_regions", "OmpRegion", "proteus_static_hash", "SCALAR", "SPECIALIZE_BLOCK", "SPECIALIZE_BOUNDS",
           "SPECIALIZE_GRID", "static_hash", "static_hashes", "xxh3_128"]
