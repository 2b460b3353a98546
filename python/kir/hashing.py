"""Kernel hashes (docs/hashing.md): the static hash of every kernel of a binary,
dynamic hashes, and Proteus's current 64-bit hash for migration.

The encoding and XXH3 live in the core (libkir); this module decides which
bytes a kernel's code is: the IR module(s) that define it when the binary holds
IR for it, otherwise the device image it was found in (decompressed).
"""
from __future__ import annotations

from dataclasses import dataclass

from kir import _core
from kir.binary import Binary, Image

Hash128 = _core.Hash128
DynamicHash = _core.DynamicHash
ArgType = _core.ArgType
static_hash = _core.static_hash
proteus_static_hash = _core.proteus_static_hash
xxh3_128 = _core.xxh3_128

CODE_IMAGES = ("cubin", "ptx", "code-object")


@dataclass
class KernelHash:
    image: int          #: index of the image the kernel was found in
    target: str         #: the image's target ("sm_90", "gfx90a")
    kernel: str         #: mangled name
    static: Hash128
    code_kind: str      #: "ir", or the image kind the code was hashed from
    source: str         #: "IR module #k, ..." or "image #i"
    proteus: int | None = None  #: Proteus's 64-bit hash (only when there is IR)


def kernel_hashes(binary: Binary, llvm20_or_newer: bool = True,
                  name_filter=None) -> tuple[list[KernelHash], list[str]]:
    """The static hash of every kernel in the binary's device images, and the
    error messages of images that could not be decoded (their kernels are left out)."""
    images = [i for i in binary.images if i.kind in CODE_IMAGES and not i.obfuscated]
    errors = binary.load_code(images, digests=True)
    images = [i for i in images if i._code is not None]
    modules = _ir_modules(binary)
    module_digests = {m.index: xxh3_128(m.bitcode) for m in modules}
    out = []
    for image in images:
        kernels = [k for k in image.kernels if name_filter is None or name_filter(k.name)]
        image_digest = image.code.image_digest  # hashed once, while decoding, for all kernels
        for kernel in kernels:
            ir = _kernel_modules(modules, image, kernel.name)
            if ir:
                digests = [module_digests[m.index] for m in ir]
                kind, source = "ir", ", ".join(f"IR module #{m.index}" for m in ir)
            else:
                digests, kind, source = [image_digest], image.kind, f"image #{image.index}"
            out.append(KernelHash(
                image=image.index, target=image.target, kernel=kernel.name,
                static=_core.static_hash_of_digests(kernel.name, kind, digests), code_kind=kind,
                source=source,
                proteus=proteus_static_hash(kernel.name, [m.bitcode for m in ir], llvm20_or_newer)
                if ir else None))
    return out, errors


def _ir_modules(binary: Binary):
    has_ir = any(i.kind == "bitcode" for i in binary.images) or any(
        i._code is not None and len(i._code.ir) > 0 for i in binary.images)
    if not has_ir:
        return []
    from kir import ir
    return [m for m in ir.ir_modules(binary) if not m.error]


def _kernel_modules(modules, image: Image, name: str):
    """The IR a kernel's static hash covers: its own Proteus per-kernel module,
    else the modules embedded in its image that define it, else the first
    module of the binary that defines it for the same target family."""
    defining = [m for m in modules if (f := m.function(name)) and f.is_kernel and not f.is_declaration]
    own = [m for m in defining if m.image == image.index and m.for_kernel in ("", name)]
    per_kernel = [m for m in own if m.for_kernel == name]
    return per_kernel[:1] or own or _same_family(defining, image)


def _same_family(defining, image: Image):
    family = "amdgcn" if image.kind == "code-object" else "nvptx"
    return [m for m in defining if m.triple.startswith(family)][:1]
