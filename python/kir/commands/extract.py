"""`kir extract BINARY -o DIR`: write each device image, decompressed.

Names follow cuobjdump's `-all -xelf all -xptx all`: `<stem>.<n>.sm_<arch>.cubin`
and `<stem>.<n>.sm_<arch>.ptx`, where <stem> is the file name up to its last dot
and images are numbered from 1 per kind in file order; LTO-IR goes to
`<stem>.<n>.sm_<arch>.ltoir`. PTX is written without its NUL terminator,
as cuobjdump does. Images of offload bundles follow the same pattern with the
target id's processor: `<stem>.<n>.gfx90a.co` (AMDGPU code objects), `.bc`
(bitcode), `.o` (host objects).

Every name component that comes from the input (bundle target ids, arch strings,
IR triples) — and the binary's stem — keeps only [A-Za-z0-9._+-] (anything else,
and any run of dots, becomes '_'; leading and trailing dots are dropped: never '..'), and each file
is created inside DIR through a descriptor of DIR, exclusively and without
following a symbolic link (O_CREAT|O_EXCL|O_NOFOLLOW; a file of that name from an
earlier run is unlinked first, a link itself and not what it points to).

Several binaries (and directories with -r, kir.commands.inputs): each one's
images go to a folder of DIR named after it (its path under the directory
walked, or its file name; '/' becomes '_', then the same safe characters;
`.2`, `.3` ... added when two inputs would share a name), created inside DIR
without following a link. One named binary writes into DIR itself, as before.

Each file written is printed, one path a line; `--json` prints one `kir.extract/1`
object instead (docs/schemas/extract.schema.json): for each input, the files
written with the image (or IR module) each holds.
"""
from __future__ import annotations

import os
import re
import sys

from kir.binary import Binary
from kir.commands import inputs
from kir.envelope import add_json_argument, envelope
from kir.errors import KirError
from kir.model import ImageKind
from kir.progress import Progress, add_argument as add_progress_argument
from kir.report import parse_arch_filter, parse_kind_filter, processor, selected_images

SUFFIX = {ImageKind.cubin: "cubin", ImageKind.old_cubin: "cubin", ImageKind.ptx: "ptx",
          ImageKind.lto_ir: "ltoir", ImageKind.code_object: "co", ImageKind.bitcode: "bc",
          ImageKind.object: "o"}
COUNTER = {ImageKind.cubin: "elf", ImageKind.old_cubin: "elf", ImageKind.ptx: "ptx",
           ImageKind.lto_ir: "ltoir", ImageKind.code_object: "co", ImageKind.bitcode: "bc",
           ImageKind.object: "o"}


def add_arguments(parser) -> None:
    inputs.add_arguments(parser)
    parser.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--arch", metavar="LIST", help="only these architectures")
    parser.add_argument("--kind", metavar="LIST", default="cubin,ptx,lto-ir,code-object,bitcode",
                        help="kinds to write (default: cubin,ptx,lto-ir,code-object,bitcode)")
    inputs.add_scan_arguments(parser)
    add_json_argument(parser, help=f"print one JSON object ({SCHEMA})")
    parser.add_argument("--ir", action="store_true",
                        help="also write every LLVM IR module (embedded bitcode, Proteus IR) as "
                             "<stem>.ir<n>.<triple arch>.bc and .ll")
    add_progress_argument(parser)


SCHEMA = "kir.extract/1"
UNSAFE = re.compile(r"[^A-Za-z0-9._+-]")


def safe_component(text: str) -> str:
    """`text` as one file-name component: [A-Za-z0-9._+-] only, no run of dots,
    no leading or trailing dot (so never '.' or '..'), never empty."""
    return re.sub(r"\.\.+", "_", UNSAFE.sub("_", text)).strip(".") or "_"


class OutputDirectory:
    """DIR, opened once: files are created relative to its descriptor."""

    def __init__(self, path: str, parent: "OutputDirectory | None" = None, quiet: bool = False,
                 progress: Progress | None = None) -> None:
        self.quiet = parent.quiet if parent is not None else quiet  # --json: list, do not print
        #: erased before a path is printed (kir.progress: the same terminal)
        self.progress: Progress = parent.progress if parent is not None else progress or Progress("extracting")
        self.written: list[dict] = []
        if parent is None:
            os.makedirs(path, exist_ok=True)
            self.path = path
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            return
        # A folder of `parent` named `path` (one safe component): made and opened
        # relative to the parent's descriptor, never through a link.
        try:
            os.mkdir(path, 0o755, dir_fd=parent.fd)
        except FileExistsError:
            pass
        self.path = os.path.join(parent.path, path)
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent.fd)

    def write(self, name: str, data: bytes, what: dict | None = None) -> str:
        if "/" in name or name in (".", ".."):
            raise ValueError(f"unsafe output name {name!r}")  # safe_component makes this impossible
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            pass
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=self.fd)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        path = os.path.join(self.path, name)
        self.written.append({"path": path, "size": len(data), **(what or {})})
        if not self.quiet:
            self.progress.clear()
            print(path)
        return path

    def close(self) -> None:
        os.close(self.fd)


def run(args) -> int:
    kinds, archs = parse_kind_filter(args.kind), parse_arch_filter(args.arch)
    many = len(args.binaries) > 1 or args.recursive
    files = list(inputs.expand(args.binaries, args.recursive))
    progress = Progress("extracting")
    out = OutputDirectory(args.output, quiet=args.json, progress=progress)
    status, names, report, failures = 0, set(), [], []
    try:
        for number, item in enumerate(files):
            if many:
                progress.label = f"extracting file {number + 1}/{len(files)}, image"
            try:
                binary = inputs.open_binary(item.path, args)
            except (KirError, OSError) as error:
                progress.clear()
                print(f"kir: error: {error}", file=sys.stderr)
                failures.append({"path": item.path, "error": str(error)})
                status = 2
                continue
            wanted = {image.index for image in selected_images(binary, archs, kinds)}
            if many and not item.explicit and not wanted and not args.ir:
                continue  # found by -r with nothing to write: a host library
            target = OutputDirectory(folder_name(item, names), out) if many else out  # one folder per input
            try:
                extract(binary, args, item.path, wanted, target)
            finally:
                if target is not out:
                    target.close()
            report.append({"path": item.path, "directory": target.path, "written": target.written})
    finally:
        progress.close()
        out.close()
    if args.json:
        import json

        import kir
        print(json.dumps(envelope(SCHEMA, kir_version=kir.__version__, output=args.output,
                          files=report, errors=failures), separators=(",", ":")))
    return status


def folder_name(item: inputs.Input, taken: set[str]) -> str:
    """The folder of DIR for one of several inputs: unique among `taken` (added to it)."""
    relative = os.path.relpath(item.path, item.root) if item.root else os.path.basename(item.path)
    base = safe_component(relative.replace(os.sep, "_"))
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    taken.add(name)
    return name


def stem(name: str) -> str:
    """The file name up to its last dot, as cuobjdump names what it extracts:
    libcublasLt.so.13 -> libcublasLt.so, app -> app (issue 26: kir cut at the first dot)."""
    head, dot, _ = name.rpartition(".")
    return head if dot and head else name


def extract(binary: Binary, args, path: str, wanted: set[int], out: OutputDirectory) -> None:
    base = safe_component(stem(os.path.basename(path)))
    counters: dict[str, int] = {}
    done = 0
    for image in binary.images:
        counter = COUNTER.get(image.kind)
        if counter is None:
            continue
        counters[counter] = counters.get(counter, 0) + 1
        if image.index not in wanted:
            continue
        out.progress.update(done, len(wanted), f"#{image.index} {image.kind} {image.target}")
        done += 1
        if image.obfuscated:
            out.progress.clear()
            print(f"kir: skipping image #{image.index}: obfuscated LTO-IR cannot be decoded",
                  file=sys.stderr)
            continue
        data = image.read()
        if image.kind is ImageKind.ptx:
            data = data.split(b"\0", 1)[0]
        target = safe_component(processor(image.target) or "host")
        out.write(f"{base}.{counters[counter]}.{target}.{SUFFIX[image.kind]}", data,
                  {"image": image.index, "kind": str(image.kind), "target": image.target})
    if args.ir:
        write_ir(binary, out, base)


def write_ir(binary: Binary, out: OutputDirectory, base: str) -> None:
    """Each IR module as bitcode and, when llvmlite reads it, as text."""
    from kir import ir
    for image in binary.images:  # embedded IR lives in device code: decode it
        if image.kind in (ImageKind.cubin, ImageKind.code_object) and not image.obfuscated:
            image.code
    modules = ir.ir_modules(binary)
    text = dict(zip((m.index for m in modules if not m.error), ir.texts([m for m in modules if not m.error])))
    for m in modules:
        arch = safe_component(m.triple.split("-", 1)[0] if m.triple else "unknown")
        stem = f"{base}.ir{m.index + 1}.{arch}"
        out.write(stem + ".bc", m.bitcode, {"ir_module": m.index, "kind": "bitcode", "target": m.triple or ""})
        if m.error:
            out.progress.clear()
            print(f"kir: warning: {binary.path}: IR module #{m.index} ({m.source}): {m.error}", file=sys.stderr)
            continue
        out.write(stem + ".ll", text[m.index].encode(), {"ir_module": m.index, "kind": "llvm-ir", "target": m.triple or ""})


__all__ = ["add_arguments", "COUNTER", "extract", "folder_name", "OutputDirectory", "run", "safe_component",
           "SCHEMA", "SUFFIX", "UNSAFE", "write_ir"]
