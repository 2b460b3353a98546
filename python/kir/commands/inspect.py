"""`kir inspect BINARY`: what device code a binary holds."""
from __future__ import annotations

import sys
from io import TextIOBase

from kir.binary import Binary
from kir.report import build_report, parse_arch_filter, parse_kind_filter, selected_images


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
                        help="print JSON (schema kir.inspect/2, see docs/json-schema.md)")
    parser.add_argument("-j", "--threads", type=int, default=0,
                        help="threads for --kernels (default: all cores)")


def run(args, out: TextIOBase = sys.stdout) -> int:
    archs, kinds = parse_arch_filter(args.arch), parse_kind_filter(args.kind)
    binary = Binary.open(args.binary, scan=args.scan)
    errors: list[str] = []
    if args.kernels:
        errors = load_code(binary, selected_images(binary, archs, kinds), args.threads)
    if args.json:
        import json
        report = build_report(binary, archs, kinds, args.kernels, errors)
        out.write(json.dumps(report, separators=(",", ":")))  # one shot: the C encoder
        out.write("\n")
    else:
        codes = [image._code for image in binary.images] if args.kernels else []
        out.write(binary._core.render_table(sorted(archs or ()), sorted(kinds or ()), codes))
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    return 2 if errors else 0


def load_code(binary: Binary, images, threads: int) -> list[str]:
    """Decode the selected images in parallel, with progress on a terminal."""
    return binary.load_code(images, threads, progress_printer())


def progress_printer():
    if not sys.stderr.isatty() or not sys.stdout.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rkir: decoding images {done}/{total}{end}")
        sys.stderr.flush()
    return show
