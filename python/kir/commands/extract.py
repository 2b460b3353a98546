"""`kir extract BINARY -o DIR`: write each device image, decompressed.

Names follow cuobjdump's `-all -xelf all -xptx all`: `<stem>.<n>.sm_<arch>.cubin`
and `<stem>.<n>.sm_<arch>.ptx`, where <stem> is the file name up to its first dot
and images are numbered from 1 per kind in file order; LTO-IR goes to
`<stem>.<n>.sm_<arch>.ltoir`. PTX is written without its NUL terminator,
as cuobjdump does. Images of offload bundles follow the same pattern with the
target id's processor: `<stem>.<n>.gfx90a.co` (AMDGPU code objects), `.bc`
(bitcode), `.o` (host objects).
"""
from __future__ import annotations

import os
import sys

from kir.binary import Binary
from kir.model import ImageKind
from kir.report import parse_arch_filter, parse_kind_filter, processor, selected_images

SUFFIX = {ImageKind.cubin: "cubin", ImageKind.old_cubin: "cubin", ImageKind.ptx: "ptx",
          ImageKind.lto_ir: "ltoir", ImageKind.code_object: "co", ImageKind.bitcode: "bc",
          ImageKind.object: "o"}
COUNTER = {ImageKind.cubin: "elf", ImageKind.old_cubin: "elf", ImageKind.ptx: "ptx",
           ImageKind.lto_ir: "ltoir", ImageKind.code_object: "co", ImageKind.bitcode: "bc",
           ImageKind.object: "o"}


def add_arguments(parser) -> None:
    parser.add_argument("binary")
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--arch", metavar="LIST", help="only these architectures")
    parser.add_argument("--kind", metavar="LIST", default="cubin,ptx,lto-ir,code-object,bitcode",
                        help="kinds to write (default: cubin,ptx,lto-ir,code-object,bitcode)")
    parser.add_argument("--scan", action="store_true", help="also find containers by magic")
    parser.add_argument("--ir", action="store_true",
                        help="also write every LLVM IR module (embedded bitcode, Proteus IR) as "
                             "<stem>.ir<n>.<triple arch>.bc and .ll")


def run(args) -> int:
    kinds, archs = parse_kind_filter(args.kind), parse_arch_filter(args.arch)
    binary = Binary.open(args.binary, scan=args.scan)
    wanted = {image.index for image in selected_images(binary, archs, kinds)}
    os.makedirs(args.output, exist_ok=True)
    base = os.path.basename(args.binary).split(".")[0]
    counters: dict[str, int] = {}
    for image in binary.images:
        counter = COUNTER.get(image.kind)
        if counter is None:
            continue
        counters[counter] = counters.get(counter, 0) + 1
        if image.index not in wanted:
            continue
        if image.obfuscated:
            print(f"kir: skipping image #{image.index}: obfuscated LTO-IR cannot be decoded",
                  file=sys.stderr)
            continue
        data = image.read()
        if image.kind is ImageKind.ptx:
            data = data.split(b"\0", 1)[0]
        target = processor(image.target) or "host"
        path = os.path.join(args.output, f"{base}.{counters[counter]}.{target}.{SUFFIX[image.kind]}")
        with open(path, "wb") as f:
            f.write(data)
        print(path)
    if args.ir:
        write_ir(binary, args.output, base)
    return 0


def write_ir(binary: Binary, directory: str, base: str) -> None:
    """Each IR module as bitcode and, when llvmlite reads it, as text."""
    from kir import ir
    for image in binary.images:  # embedded IR lives in device code: decode it
        if image.kind in (ImageKind.cubin, ImageKind.code_object) and not image.obfuscated:
            image.code
    for m in ir.ir_modules(binary):
        arch = m.triple.split("-", 1)[0] if m.triple else "unknown"
        stem = os.path.join(directory, f"{base}.ir{m.index + 1}.{arch}")
        with open(stem + ".bc", "wb") as f:
            f.write(m.bitcode)
        print(stem + ".bc")
        if m.error:
            print(f"kir: module #{m.index}: {m.error}", file=sys.stderr)
            continue
        with open(stem + ".ll", "w") as f:
            f.write(m.text())
        print(stem + ".ll")
