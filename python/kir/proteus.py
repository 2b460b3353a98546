"""Proteus's current 64-bit static hashes, offline (docs/hashing.md, "Proteus
compatibility"): the value Proteus's runtime computes for each kernel it would
hash, so its caches and recordings can be matched and migrated.

What Proteus computes (github:Olympus-HPC/proteus, e587017; libkir's
kir/hash/proteus.hpp cites the functions): static hash = hashCombine(hash(mangled
name), ModuleHash), where ModuleHash is

- CUDA: the fold of hash(bytes of each `_jit_bitcode_*` global) over the module
  ids attached to the binary, in registration order. Relocatable device code:
  every unit's constructor calls __proteus_register_linked_binary before
  __cudaRegisterLinkedBinary, so the one linked binary gets every unit's id, in
  the order the units' constructors run.
- HIP: the fold of the decimal suffixes of every `.jit.bitcode*` section of the
  device code object, in section order.

Only kernels registered through __proteus_register_function (those the pass
found annotated) are hashed. Offline they are the kernels the embedded IR marks:
`!proteus.jit` metadata (what the pass leaves; it deletes
@llvm.global.annotations), a `jit` annotation (IR not processed by the pass), or a
per-kernel `.jit.bitcode.<kernel>.…` section (emitted only for JIT kernels),
read with llvmlite (kir.ir).

Registration order offline (CUDA RDC): the units' constructors run in .init_array
order, which is the host link order of their objects; the linker lays out the
units' relocatable fatbins in `__nv_relfatbin` in that same input order. So the
module ids are ordered by the first `__nv_relfatbin` container (file order)
whose images define them; modules no such container names keep their order in
the image (symbol order). The device link order — the order of the `_jit_bitcode_*`
symbols in the linked cubin — can differ (tests/support/build.py,
proteus_cuda_rdc) and is not what Proteus uses.
"""
from __future__ import annotations

from kir import _core
from kir.binary import Binary, Image
from kir.errors import KirError
from kir.model import CODE_IMAGES

RELOCATABLE_SECTION = "__nv_relfatbin"  # one unit's relocatable device code (RDC)
CUDA_MODULE_PREFIX = "_jit_bitcode_"


def jit_kernels(code: _core.DeviceCode) -> set[str]:
    """The kernels of a device image the Proteus pass registered as JIT kernels."""
    names = {m.kernel for m in code.ir if m.kernel}
    for module in _read_ir([code]):
        names |= {f.name for f in module.kernels if f.jit and not f.is_declaration}
    return names & {k.name for k in code.kernels}


def _read_ir(codes: list[_core.DeviceCode]):
    """The IR embedded in these images, read (kir.ir: one child process for all)."""
    from kir.ir import IrModule, read_modules
    return read_modules([IrModule(0, "", -1, bitcode=m.bitcode) for code in codes for m in code.ir])


def registration_order(binary: Binary) -> dict[str, int]:
    """CUDA module id -> its place in registration order (see the module docstring)."""
    order: dict[str, int] = {}
    for image in binary.images:
        if image.container.section != RELOCATABLE_SECTION or image.kind not in ("cubin", "ptx"):
            continue
        code = _code(image)
        for g in code.globals if code is not None else []:
            if g.name.startswith(CUDA_MODULE_PREFIX):
                order.setdefault(g.name, len(order))
    return order


def proteus_static_hashes(binary: Binary, llvm20_or_newer: bool = True,
                          errors: list[str] | None = None) -> dict[tuple[int, str], int]:
    """(image index, mangled kernel) -> Proteus's 64-bit static hash, for the kernels
    Proteus would hash (JIT kernels of images carrying Proteus IR). Images whose
    hash Proteus could not compute either (a `.jit.bitcode*` section name without a
    number) are left out, their error appended to `errors`."""
    images = [i for i in binary.images if i.kind in CODE_IMAGES and not i.obfuscated]
    pending = [i for i in images if i._code is None]
    if pending:
        binary.load_code(pending)  # in parallel; images decoded already are kept as they are
    order = registration_order(binary)
    # A unit's relocatable piece of an RDC build is never loaded: Proteus hashes
    # the kernel through the linked image.
    hashed = [(image, code) for image in images if (code := _code(image)) is not None and code.ir
              and image.container.section != RELOCATABLE_SECTION]
    _read_ir([code for _, code in hashed])  # all at once: jit_kernels below finds them read
    out: dict[tuple[int, str], int] = {}
    for image, code in hashed:
        if image.kind == "code-object":
            try:
                module = _core.proteus_hip_module_hash(code, llvm20_or_newer)
            except KirError as error:
                if errors is not None:
                    errors.append(f"image #{image.index}: {error}")
                continue
        else:
            ids = [(order.get(m.name, len(order) + i), m.bitcode) for i, m in enumerate(code.ir)
                   if m.name.startswith(CUDA_MODULE_PREFIX)]
            module = _core.proteus_cuda_module_hash([b for _, b in sorted(ids, key=lambda x: x[0])],
                                                    llvm20_or_newer)
        if module is None:
            continue
        for name in sorted(jit_kernels(code)):
            out[(image.index, name)] = _core.proteus_static_hash_of_module(name, module, llvm20_or_newer)
    return out


def _code(image: Image) -> _core.DeviceCode | None:
    try:
        return image.code
    except KirError:
        return None


__all__ = ["CODE_IMAGES", "CUDA_MODULE_PREFIX", "jit_kernels", "proteus_static_hashes", "registration_order",
           "RELOCATABLE_SECTION"]
