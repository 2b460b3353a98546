"""Kernel hashes (docs/hashing.md): the static hash of every kernel of a binary,
dynamic hashes, and Proteus's current 64-bit hash for migration.

The encoding, XXH3 and the policy deciding which bytes a kernel's code is (the
IR embedded in its image, else the image) live in the core (libkir), so `kir
hash`, the hook layer, the recorder and the replay planner agree by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

from kir import _core
from kir.binary import Binary
from kir.model import CODE_IMAGES, CodeKind, ImageKind
from kir.proteus import proteus_static_hashes

Hash128 = _core.Hash128
DynamicHash = _core.DynamicHash
ArgType = _core.ArgType
static_hash = _core.static_hash
proteus_static_hash = _core.proteus_static_hash
xxh3_128 = _core.xxh3_128

kernel_code = _core.kernel_code
kernel_static_hash = _core.kernel_static_hash


@dataclass
class KernelHash:
    image: int          #: index of the image the kernel was found in
    image_kind: ImageKind  #: that image's kind (cubin, ptx, code-object)
    target: str         #: the image's target ("sm_90", "gfx90a")
    kernel: str         #: mangled name
    static: Hash128
    code_kind: CodeKind    #: ir, or the image kind the code was hashed from
    source: str         #: "IR _jit_bitcode_… in cubin image #i" or "ptx image #i"
    proteus: int | None = None  #: Proteus's 64-bit hash (JIT kernels only, kir/proteus.py)


def kernel_hashes(binary: Binary, llvm20_or_newer: bool = True,
                  name_filter=None) -> tuple[list[KernelHash], list[str]]:
    """The static hash of every kernel of every device image, once per (kernel,
    image), under libkir's one policy (kir/hash/kernel_code.hpp, docs/hashing.md),
    and the error messages of images that could not be decoded (their kernels
    are left out)."""
    images = [i for i in binary.images if i.kind in CODE_IMAGES and not i.obfuscated]
    errors = binary.load_code(images, digests=True)
    proteus_hashes = proteus_static_hashes(binary, llvm20_or_newer)  # kir/proteus.py
    out = []
    for image in images:
        code = image._code
        if code is None:
            continue
        for kernel in code.kernels:
            if name_filter is not None and not name_filter(kernel.name):
                continue
            what = kernel_code(code, kernel.name)
            modules = [code.ir[m] for m in what.modules]
            where = f"{image.kind} image #{image.index}"
            source = f"IR {', '.join(m.name for m in modules)} in {where}" if modules else where
            out.append(KernelHash(
                image=image.index, image_kind=image.kind, target=image.target, kernel=kernel.name,
                static=kernel_static_hash(code, kernel.name), code_kind=what.kind, source=source,
                proteus=proteus_hashes.get((image.index, kernel.name))))
    return out, errors
