"""`kir inspect BINARY`: what device code a binary holds."""
from __future__ import annotations

import os
import sys
from io import TextIOBase

from kir.binary import Binary
from kir.errors import OptionError
from kir.model import ImageKind
from kir.report import build_report, parse_arch_filter, parse_kind_filter, render_table, selected_images


def add_arguments(parser) -> None:
    parser.add_argument("binary", help="executable, shared library, object, archive or fatbin")
    parser.add_argument("--kernels", action="store_true",
                        help="also list each image's kernels and parameter layout "
                             "(decompresses images, in parallel)")
    parser.add_argument("--arch", metavar="LIST",
                        help="only images for these targets, e.g. sm_90,sm_80,gfx90a")
    parser.add_argument("--kind", metavar="LIST",
                        help="only images of these kinds: cubin, ptx, lto-ir, old-cubin, "
                             "code-object, bitcode, host, object")
    parser.add_argument("--scan", action="store_true",
                        help="also find containers by magic anywhere in the file")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (schema kir.inspect/3, see docs/json-schema.md)")
    parser.add_argument("--ir", action="store_true",
                        help="also list the LLVM IR modules (embedded bitcode, Proteus IR) with "
                             "their kernels and signatures (reads them with llvmlite)")
    parser.add_argument("-j", "--threads", type=int, default=0,
                        help="threads for --kernels (default and at most: all cores)")


def run(args, out: TextIOBase = sys.stdout) -> int:
    archs, kinds = parse_arch_filter(args.arch), parse_kind_filter(args.kind)
    if args.threads < 0:
        raise OptionError(f"-j/--threads {args.threads}: expected 0 (all cores) or a positive number")
    binary = Binary.open(args.binary, scan=args.scan)
    errors: list[str] = []
    if args.kernels:
        errors = load_code(binary, selected_images(binary, archs, kinds), args.threads)
    modules, links = read_ir(binary, args.ir, args.kernels)
    if args.json:
        import json
        report = build_report(binary, archs, kinds, args.kernels, errors,
                              modules if args.ir else None, links)
        out.write(json.dumps(report, separators=(",", ":")))  # one shot: the C encoder
        out.write("\n")
    else:
        codes = [image._code for image in binary.images] if args.kernels else []
        notes = {key: f"IR: module #{index}" for key, index in links.items()}
        if args.kernels and modules:
            for image in binary.images:
                for kernel in (image._code.kernels if image._code else []):
                    notes.setdefault((image.index, kernel.name), "IR: none")
        out.write(render_table(binary, archs, kinds, codes, notes))
        if args.ir:
            out.write(render_ir(modules))
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    return 2 if errors else 0


def read_ir(binary: Binary, wanted: bool, with_kernels: bool):
    """The IR modules (when --ir, or --kernels and the binary holds IR) and the
    kernel -> module links. llvmlite is imported only when there is IR to read."""
    has_ir = any(i.kind is ImageKind.bitcode for i in binary.images) or any(
        i._code is not None and len(i._code.ir) > 0 for i in binary.images)
    if not (wanted or (with_kernels and has_ir)):
        return [], {}
    if wanted and not has_ir:  # embedded IR lives in device code: decode it
        for image in binary.images:
            if image.kind in (ImageKind.cubin, ImageKind.code_object) and not image.obfuscated:
                image.code
    from kir import ir
    modules = ir.ir_modules(binary)
    return modules, ir.kernel_ir(binary, modules) if with_kernels else {}


def render_ir(modules) -> str:
    lines = [f"\nIR modules: {len(modules)}"]
    for m in modules:
        lines.append(f"-- module #{m.index}: {m.source}, {len(m.bitcode)} bytes")
        if m.error:
            lines.append(f"   unreadable: {m.error}")
            continue
        lines.append(f"   triple {m.triple or '-'}, {len(m.functions)} functions, "
                     f"{len(m.kernels)} kernels, {len(m.globals)} globals")
        for f in m.kernels:
            params = ", ".join(p.type + (f" {p.pointee_kind}({p.pointee_size})" if p.pointee_kind else "")
                               for p in f.params)
            jit = f"  [jit {'unknown' if f.jit_args is None else f.jit_args}]" if f.jit else ""
            lines.append(f"   kernel {f.name}({params}){jit}")
    return "\n".join(lines) + "\n"


def load_code(binary: Binary, images, threads: int) -> list[str]:
    """Decode the selected images in parallel, with progress on a terminal."""
    threads = min(threads, os.cpu_count() or 1)  # more threads than cores only cost memory
    return binary.load_code(images, threads, progress_printer())


def progress_printer():
    if not sys.stderr.isatty() or not sys.stdout.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rkir: decoding images {done}/{total}{end}")
        sys.stderr.flush()
    return show
