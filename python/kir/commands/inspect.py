"""`kir inspect BINARY`: what device code a binary holds."""
from __future__ import annotations

import sys
from io import TextIOBase

from kir.binary import Binary
from kir.report import build_report, parse_arch_filter, selected_images


def add_arguments(parser) -> None:
    parser.add_argument("binary", help="executable, shared library, object, archive or fatbin")
    parser.add_argument("--kernels", action="store_true",
                        help="also list each image's kernels and parameter layout "
                             "(decompresses images, in parallel)")
    parser.add_argument("--arch", metavar="LIST",
                        help="only images for these architectures, e.g. sm_90,sm_80")
    parser.add_argument("--scan", action="store_true",
                        help="also find containers by magic anywhere in the file")
    parser.add_argument("--json", action="store_true",
                        help="print JSON (schema kir.inspect/1, see docs/json-schema.md)")
    parser.add_argument("-j", "--threads", type=int, default=0,
                        help="threads for --kernels (default: all cores)")


def run(args, out: TextIOBase = sys.stdout) -> int:
    archs = parse_arch_filter(args.arch)
    binary = Binary.open(args.binary, scan=args.scan)
    errors: list[str] = []
    if args.kernels:
        errors = load_code(binary, selected_images(binary, archs), args.threads)
    report = build_report(binary, archs, args.kernels, errors, plain=args.json)
    if args.json:
        import json
        out.write(json.dumps(report, separators=(",", ":")))  # one shot: the C encoder
        out.write("\n")
    else:
        render_table(report, out)
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    return 2 if errors else 0


def load_code(binary: Binary, images, threads: int) -> list[str]:
    """Decode the selected images in parallel, with progress on a terminal."""
    wanted = {id(i) for i in images}
    if len(wanted) == len(binary.images):
        return binary.load_code(threads, progress_printer())
    errors = []
    for image in images:  # a filtered subset: decode just those
        try:
            image.code
        except Exception as error:  # KirError
            errors.append(str(error))
    return errors


def progress_printer():
    if not sys.stderr.isatty() or not sys.stdout.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rkir: decoding images {done}/{total}{end}")
        sys.stderr.flush()
    return show


def render_table(report: dict, out: TextIOBase) -> None:
    images = report["images"]
    kinds: dict[str, int] = {}
    for i in images:
        kinds[i["kind"]] = kinds.get(i["kind"], 0) + 1
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    out.write(f"{report['path']}: {report['format']}, {len(report['containers'])} containers, "
              f"{len(images)} images" + (f" ({summary})" if summary else "") + "\n")
    by_container: dict[int, list] = {}
    for i in images:
        by_container.setdefault(i["container"], []).append(i)
    lines = [IMAGE_HEADER] if images else []
    for c in report["containers"]:
        lines.append(container_line(c))
        for i in by_container.get(c["index"], []):
            lines.append(image_line(i))
            if "code" in i:
                lines.extend(kernel_lines(i["code"]))
    out.write("\n".join(lines) + ("\n" if lines else ""))


def container_line(c: dict) -> str:
    where = f"{c['member']}:" if c["member"] else ""
    where += c["section"] or "(no section)"
    wrapper = ""
    if c["wrapper"]:
        wrapper = f", wrapper v{c['wrapper']['version']} at {c['wrapper']['file_offset']:#x}"
    return (f"-- container {c['index']}: {where} at {c['file_offset']:#x}, {c['size']} bytes, "
            f"found by {c['found_by']}{wrapper}")


IMAGE_HEADER = "image  kind       arch    version  compression  stored      size        identifier"


def image_line(i: dict) -> str:
    version = f"{i['version'][0]}.{i['version'][1]}"
    notes = " ".join(filter(None, [i["identifier"], "(obfuscated)" if i["obfuscated"] else ""]))
    return (f"{i['index']:<6} {i['kind']:<10} {i['arch']:<7} {version:<8} "
            f"{i['compression']:<12} {i['stored_size']:<11} {i['size']:<11} {notes}").rstrip()


def kernel_lines(code) -> list[str]:
    lines = []
    for k in code.kernels:
        extra = ""
        if k.registers is not None:
            extra = f"  (regs {k.registers}" + (f", shared {k.shared_bytes})" if k.shared_bytes else ")")
        lines.append(f"         kernel {k.demangled}")
        lines.append(f"           {k.name}  params[{k.param_count}] {k.layout}{extra}")
    return lines
