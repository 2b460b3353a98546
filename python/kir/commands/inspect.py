"""`kir inspect BINARY...`: what device code binaries hold.

Several inputs (and directories with -r, kir.commands.inputs): each file's
table starts with its header line (`PATH: FORMAT, N containers, M images`), a
blank line between files, and a summary line ends the output; `--json` prints
one `kir.inspect-files/1` object holding each file's `kir.inspect/3` report. One
named file prints exactly one report, as before.

`--require LIST` (a CI check): each binary read must hold every item of LIST
(`sm_90`: a cubin for sm_90; `compute_90`: PTX for sm_90; `gfx90a`: an AMDGPU
code object for it; a kind name, `ptx`, `cubin`, `lto-ir`, ...: an image of that
kind); each binary lacking one is named on stderr and the exit status is 1. Files
found by -r that hold no device code are not checked (a site-packages is full of
host libraries); named files always are."""
from __future__ import annotations

import os
import sys
from io import TextIOBase

import kir
from kir.binary import Binary
from kir.commands import inputs
from kir.envelope import add_json_argument, envelope
from kir.errors import KirError, OptionError
from kir.kernel_pattern import HELP as KERNEL_HELP, kernel_pattern
from kir.model import ImageKind
from kir.progress import Progress, add_argument as add_progress_argument
from kir.report import (
    KINDS,
    KernelsText,
    build_report,
    parse_arch_filter,
    parse_kind_filter,
    processor,
    selected_images,
    selected_rows,
    table_parts,
)
from kir.words import plural

SCHEMA_FILES = "kir.inspect-files/1"


def add_arguments(parser) -> None:
    inputs.add_arguments(parser)
    parser.add_argument("--require", metavar="LIST",
                        help="exit 1, naming each binary that lacks one of these: sm_90 (a cubin), "
                             "compute_90 (PTX for sm_90), gfx90a (a code object), or a kind (ptx, cubin, "
                             "lto-ir, ...) — a CI check")
    parser.add_argument("--kernels", action="store_true",
                        help="also list each image's kernels and parameter layout "
                             "(decompresses images, in parallel)")
    parser.add_argument("--kernel", metavar="REGEX", help=f"only kernels whose {KERNEL_HELP}; implies --kernels")
    parser.add_argument("--arch", metavar="LIST",
                        help="only images for these targets, e.g. sm_90,sm_80,gfx90a")
    parser.add_argument("--kind", metavar="LIST",
                        help="only images of these kinds: cubin, ptx, lto-ir, old-cubin, "
                             "code-object, bitcode, host, object")
    inputs.add_scan_arguments(parser)
    parser.add_argument("--sass", action="store_true",
                        help="also print each cubin's kernels as SASS (nvdisasm: a CUDA toolkit's, or "
                             "the nvidia-cuda-nvdisasm wheel); with --kernel, only those kernels")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print no table: only the binaries that lack what --require asks and the "
                             "verdict (a CI check over a prefix)")
    add_json_argument(parser, help="print JSON (schema kir.inspect/3: docs/json-schema.md, installed under "
                             "kir.docs_dir())")
    parser.add_argument("--ir", action="store_true",
                        help="also list the LLVM IR modules (embedded bitcode, Proteus IR) with "
                             "their kernels and signatures (reads them with llvmlite)")
    parser.add_argument("-j", "--threads", type=int, default=0,
                        help="threads for --kernels (default and at most: all cores)")
    add_progress_argument(parser)


def run(args, out: TextIOBase | None = None) -> int:
    out = sys.stdout if out is None else out  # at the call: kir.cli's --pretty replaces sys.stdout
    archs, kinds = parse_arch_filter(args.arch), parse_kind_filter(args.kind)
    required = parse_requirements(args.require)
    if args.threads < 0:
        raise OptionError(f"-j/--threads {args.threads}: expected 0 (all cores) or a positive number")
    args.kernel_filter = None
    if args.kernel is not None:
        args.kernels = True
        args.kernel_filter = kernel_pattern(args.kernel).selects  # (name, demangled) -> bool
    if args.sass:
        if args.json:
            raise OptionError("--sass prints text: not with --json")
        args.kernels = True
    if args.quiet and (args.json or args.kernels or args.ir):
        raise OptionError("-q/--quiet prints no table: not with --json, --kernels, --kernel or --ir")
    if args.threads and not args.kernels:
        raise OptionError("-j/--threads: only with --kernels (or --kernel): nothing else is decoded")
    many = len(args.binaries) > 1 or args.recursive
    # Kernels' JSON from the core, spliced in at the end (a --kernel filter needs the dicts).
    args.kernels_text = KernelsText() if args.kernel_filter is None else None
    files = list(inputs.expand(args.binaries, args.recursive))
    reports, failures, lacking, skipped, images, read = [], [], [], 0, 0, 0
    status = 0
    reading = Progress("reading files", total=len(files)) if len(files) > 1 else None
    for number, item in enumerate(files):
        if reading is not None:
            reading.update(number, item=item.path)
        try:
            binary = inputs.open_binary(item.path, args)
        except (KirError, OSError) as error:
            failures.append({"path": item.path, "error": str(error)})
            if reading is not None:
                reading.clear()
            print(f"kir: error: {error}", file=sys.stderr)
            continue
        if reading is not None:
            reading.clear()  # the file's table goes to the same terminal
        # plain tuples, no Image object per image (a prefix check reads 25,000); only where needed
        rows = selected_rows(binary) if not item.explicit or required is not None or args.quiet else None
        if not item.explicit and not rows:
            skipped += 1  # found by -r, no device code: a host library
            continue
        missing = missing_requirements(rows, required) if required is not None else None
        if missing:
            lacking.append((item.path, missing))
        if args.quiet:
            read += 1
            images += len(rows if archs is None and kinds is None else selected_rows(binary, archs, kinds))
            continue
        if many and not args.json and read:
            out.write("\n")
        read += 1
        if many and not args.json:  # the summary line's count, only where a summary line is printed
            images += len(selected_rows(binary, archs, kinds))
        report, code = inspect_one(binary, args, archs, kinds, out, missing, as_json=args.json and not many)
        if report is not None:
            reports.append(report)
        status = max(status, code)
    if reading is not None:
        reading.close()
    for path, missing in lacking:
        print(f"kir: {path} lacks {', '.join(missing)}", file=sys.stderr)
    if args.quiet:
        out.write(summary_line(read, images, failures, skipped, lacking, required is not None))
    elif many:
        if args.json:
            for part in (args.kernels_text or KernelsText()).parts(envelope(
                    SCHEMA_FILES, kir_version=kir.__version__, files=reports, errors=failures,
                    skipped=skipped, lacking=[{"path": p, "missing": m} for p, m in lacking])):
                out.write(part)
            out.write("\n")
        else:
            out.write(("\n" if read else "") + summary_line(read, images, failures, skipped, lacking,
                                                                 required is not None))
    if failures:
        status = 2
    return status or (1 if lacking else 0)


def summary_line(read: int, images: int, failures: list, skipped: int, lacking: list, checked: bool) -> str:
    """'kir: 3 files, 14 images; 1 unreadable; 5 skipped (no device code); 1 lacks what --require asks'"""
    parts = [f"kir: {plural(read, 'file')}, {plural(images, 'image')}"]
    if failures:
        parts.append(f"{len(failures)} unreadable")
    if skipped:
        parts.append(f"{skipped} skipped (no device code)")
    if checked:
        parts.append(f"{len(lacking)} lack{'s' if len(lacking) == 1 else ''} what --require asks"
                     if lacking else "all hold what --require asks")
    return "; ".join(parts) + "\n"


def parse_requirements(text: str | None) -> list[tuple[str, str, str | None]] | None:
    """'sm_90,ptx,compute_80,gfx90a' -> [(item, kind, processor or None)]; None when no --require."""
    if text is None:
        return None
    required = []
    for part in (p.strip() for p in text.split(",")):
        if part in KINDS:
            required.append((part, part, None))
        elif part.startswith("compute_") and part[8:].isdigit():
            required.append((part, ImageKind.ptx, f"sm_{part[8:]}"))
        elif part.startswith("sm_") and part[3:].isdigit() or part.isdigit():
            required.append((part, ImageKind.cubin, f"sm_{part.rsplit('_', 1)[-1]}"))
        elif part.startswith("gfx") and len(part) > 3:
            required.append((part, ImageKind.code_object, processor(part)))
        else:
            raise OptionError(f"--require: invalid item '{part}': expected e.g. sm_90, compute_90, gfx90a "
                              f"or a kind ({', '.join(KINDS)})")
    return required


def missing_requirements(rows: list[tuple], required) -> list[str]:
    """The items of --require that no image of a binary satisfies (`rows`: its
    report.selected_rows)."""
    have = {(kind, processor(target)) for _, _, kind, target, *_ in rows}
    kinds = {kind for kind, _ in have}
    return [item for item, kind, target in required
            if (kind not in kinds if target is None else (kind, target) not in have)]


def inspect_one(binary: Binary, args, archs, kinds, out, missing, as_json: bool):
    """Print one binary's table (or, `as_json`, its report); returns (its report when
    --json, exit status)."""
    errors: list[str] = []
    if args.kernels:
        errors = load_code(binary, selected_images(binary, archs, kinds), args.threads)
    modules, links = read_ir(binary, args.ir, args.kernels)
    report = None
    if args.json:
        report = build_report(binary, archs, kinds, args.kernels, errors,
                              modules if args.ir else None, links, args.kernels_text)
        if missing is not None:
            report["missing"] = missing
        if args.kernel_filter is not None:
            for image in report["images"]:
                image["kernels"] = [k for k in image.get("kernels", [])
                                    if args.kernel_filter(k["name"], k["demangled"])]
        if as_json:
            for part in (args.kernels_text or KernelsText()).parts(report):  # the C encoder, then the kernels' texts
                out.write(part)
            out.write("\n")
    else:
        codes = [image._code for image in binary.images] if args.kernels else []
        notes = {key: f"IR: module #{index}" for key, index in links.items()}
        if args.kernels and modules:
            for image in binary.images:
                for kernel in (image._code.kernels if image._code else []):
                    notes.setdefault((image.index, kernel.name), "IR: none")
        if args.kernels:
            omp_region_notes(binary, notes)
        keep = args.kernel_filter  # (name, demangled) -> bool, or None
        for part in table_parts(binary, archs, kinds, codes, notes, keep):  # written as made: never whole
            out.write(part)
        if args.ir:
            out.write(render_ir(modules))
        if args.sass:
            write_sass(binary, archs, kinds, args.kernel_filter, out, errors)
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    return report, 2 if errors else 0


def write_sass(binary: Binary, archs, kinds, keep, out, errors: list[str]) -> None:
    """Each selected cubin's kernels (those `keep` accepts) as SASS, after the table."""
    from kir.sass import disassemble, find_nvdisasm
    tool = find_nvdisasm()
    for image in selected_images(binary, archs, kinds):
        if image.kind is not ImageKind.cubin or image.obfuscated or image._code is None:
            continue
        names = [k.name for k in image._code.kernels if keep is None or keep(k.name, k.demangled)]
        if not names:
            continue
        try:
            found = disassemble(image.read(), names, tool)
        except KirError as error:
            errors.append(f"{binary.path}: cubin image #{image.index}: {error}")
            continue
        for name in names:
            out.write(f"\n-- sass: cubin image #{image.index} {image.arch} {name}\n")
            out.write(found.get(name, "   (nvdisasm printed no code for it)\n"))


def omp_region_notes(binary: Binary, notes: dict) -> None:
    """Each OpenMP region kernel of a decoded device image gets its region identity
    (docs/hashing.md) at the end of its note."""
    from kir.hashing import image_omp_region
    for image in binary.images:
        names = [k.name for k in (image._code.kernels if image._code else []) if k.name.startswith("__omp_offloading_")]
        data = image.read() if names else b""
        for name in names:
            identity = image_omp_region(name, image, data)
            if identity is not None:
                key = (image.index, name)
                notes[key] = (notes[key] + "  " if key in notes else "") + f"[OpenMP region {identity}]"


def read_ir(binary: Binary, wanted: bool, with_kernels: bool):
    """The IR modules (when --ir, or --kernels and the binary holds IR) and the
    kernel -> module links. llvmlite is imported only when there is IR to read."""
    if not (wanted or with_kernels):  # the listing alone: no image object is needed
        return [], {}
    has_ir = any(i.kind is ImageKind.bitcode for i in binary.images) or any(
        i._code is not None and len(i._code.ir) > 0 for i in binary.images)
    if not (wanted or (with_kernels and has_ir)):
        return [], {}
    from kir.errors import llvmlite_installed
    if not wanted and not llvmlite_installed():  # --kernels' "IR: module #i" notes need llvmlite; --ir says so
        return [], {}
    if wanted and not has_ir:  # embedded IR lives in device code: decode it
        for image in binary.images:
            if image.kind in (ImageKind.cubin, ImageKind.code_object) and not image.obfuscated:
                image.code
    from kir import ir
    modules = ir.ir_modules(binary)
    return modules, ir.kernel_ir(binary, modules) if with_kernels else {}


def render_ir(modules) -> str:
    lines = [f"\nIR modules: {len(modules)}"]  # a heading: "IR modules: 1"
    for m in modules:
        lines.append(f"-- module #{m.index}: {m.source}, {plural(len(m.bitcode), 'byte')}")
        if m.error:
            lines.append(f"   unreadable: {m.error}")
            continue
        lines.append(f"   triple {m.triple or '-'}, {plural(len(m.functions), 'function')}, "
                     f"{plural(len(m.kernels), 'kernel')}, {plural(len(m.globals), 'global')}")
        for f in m.kernels:
            params = ", ".join(p.type + (f" {p.pointee_kind}({p.pointee_size})" if p.pointee_kind else "")
                               for p in f.params)
            jit = f"  [jit {'unknown' if f.jit_args is None else f.jit_args}]" if f.jit else ""
            region = f"  [OpenMP region {f.omp_region}]" if f.omp_region else ""
            lines.append(f"   kernel {f.name}({params}){jit}{region}")
    return "\n".join(lines) + "\n"


def load_code(binary: Binary, images, threads: int) -> list[str]:
    """Decode the selected images in parallel, with progress on a terminal (kir.progress)."""
    threads = min(threads, os.cpu_count() or 1)  # more threads than cores only cost memory
    with Progress("decoding images") as progress:
        return binary.load_code(images, threads, progress.callback)


__all__ = ["add_arguments", "inspect_one", "load_code", "missing_requirements", "parse_requirements",
           "read_ir", "render_ir", "run", "SCHEMA_FILES", "summary_line"]
