"""`kir diff A B`: the kernels added, removed and changed between two binaries —
for checking a rebuild, a JIT cache or a recording against a new binary.

Each side's kernels are those `kir hash` lists: one per (kernel, image) of the
device images kir decodes (cubin, PTX, AMDGPU code objects), with its static
hash (docs/hashing.md), registers, static shared memory and parameter layout
(offset and size of each parameter) from the image. A kernel is matched across
the two sides by target, image kind and mangled name; one left unmatched on
both sides whose demangled name without its parameter list is the same (and
unique on each side) is matched too, as a kernel whose signature changed
(`renamed`: a C++ kernel's mangled name encodes its parameter types). A matched
kernel is `changed` when its static hash, its own code, registers, shared memory
or parameter layout differ; the others are `unchanged`.

The static hash covers the kernel's whole image (docs/hashing.md): any change to
a translation unit changes the static hash of every kernel in it. `code` tells
the kernel's own machine code apart: a BLAKE2b-128 digest of its `.text.NAME`
section in a cubin (null for other images), so a kernel whose static hash
changed while its code did not is shown as such.

`--arch LIST` keeps those targets, `--kernel REGEX` kernels whose mangled or
demangled name matches (Python's re, searched). Exit status, as diff(1): 0 no
difference, 1 differences, 2 bad input. `--json` prints one `kir.diff/1` object
(docs/schemas/diff.schema.json)."""
from __future__ import annotations

import hashlib
import sys

from kir.commands import inputs
from kir.envelope import add_json_argument, envelope
from kir.errors import KirError
from kir.kernel_pattern import HELP as KERNEL_HELP, kernel_pattern

SCHEMA = "kir.diff/1"
#: What a change can be, in the order printed.
FIELDS = ("renamed", "static", "code", "registers", "shared_bytes", "params")


def add_arguments(parser) -> None:
    parser.add_argument("a", metavar="A", help="the binary before")
    parser.add_argument("b", metavar="B", help="the binary after")
    parser.add_argument("--arch", metavar="LIST", help="only images for these targets, e.g. sm_90,gfx90a")
    parser.add_argument("--kernel", metavar="REGEX", help=f"only kernels whose {KERNEL_HELP}")
    inputs.add_scan_arguments(parser)
    parser.add_argument("--unchanged", action="store_true", help="also list the kernels that did not change")
    add_json_argument(parser, help=f"print one JSON object ({SCHEMA})")
    from kir.progress import add_argument as add_progress_argument
    add_progress_argument(parser)


def kernels_of(path: str, archs, pattern, args, progress=None) -> tuple[dict, list[str]]:
    """{(target, image kind, mangled name): KERNEL record} of one binary, and the
    messages of images that could not be decoded."""
    from kir.hashing import kernel_hashes
    from kir.report import processor
    binary = inputs.open_binary(path, args)
    hashes, errors = kernel_hashes(binary, progress=progress)
    out: dict[tuple[str, str, str], dict] = {}
    texts: dict[int, dict[str, bytes]] = {}
    images = binary.images
    by_name: dict[int, dict] = {}  # image -> {mangled name: Kernel}, read once per image
    for h in hashes:
        if archs is not None and processor(h.target) not in archs:
            continue
        image = images[h.image]
        if h.image not in by_name:
            by_name[h.image] = {k.name: k for k in image.kernels}  # decoded by kernel_hashes
        kernel = by_name[h.image][h.kernel]
        if pattern is not None and not pattern.selects(kernel.name, kernel.demangled):
            continue
        key = (h.target, str(h.image_kind), h.kernel)
        if key in out:  # the same kernel in a second image of the same target: the first one counts
            continue
        if h.image_kind == "cubin" and h.image not in texts:
            texts[h.image] = cubin_texts(image.read())
        code = texts.get(h.image, {}).get(h.kernel)
        out[key] = {
            "kernel": h.kernel,
            "demangled": kernel.demangled,
            "target": h.target,
            "image_kind": str(h.image_kind),
            "image": h.image,
            "static": h.static_hash,
            "code": hashlib.blake2b(code, digest_size=16).hexdigest() if code is not None else None,
            "registers": kernel.registers,
            "shared_bytes": kernel.shared_bytes,
            "params": [{"offset": p.offset, "size": p.size} for p in kernel.params],
        }
    return out, errors


def cubin_texts(data: bytes) -> dict[str, bytes]:
    """{kernel: the bytes of its `.text.KERNEL` section} of a cubin, through kir's ELF
    reader; {} for anything that is no valid ELF."""
    from kir.binary import elf_sections
    try:
        sections = elf_sections(data)
    except KirError:
        return {}
    return {name[len(".text."):]: data[offset:offset + size]
            for _, name, kind, _, _, offset, size, *_ in sections
            if name.startswith(".text.") and kind != 8}  # not NOBITS


def base_name(demangled: str) -> str:
    """'ns::f<int>(float*, int)' -> 'ns::f<int>': the demangled name without its
    parameter list (the last balanced parentheses)."""
    if not demangled.endswith(")"):
        return demangled
    depth = 0
    for i in range(len(demangled) - 1, -1, -1):
        if demangled[i] == ")":
            depth += 1
        elif demangled[i] == "(":
            depth -= 1
            if depth == 0:
                return demangled[:i]
    return demangled


def compare(a: dict, b: dict) -> dict:
    """The kir.diff/1 body: added, removed, changed, unchanged."""
    matched = [(a[key], b[key]) for key in a if key in b]
    only_a = {key: v for key, v in a.items() if key not in b}
    only_b = {key: v for key, v in b.items() if key not in a}

    def by_base(side: dict) -> dict:
        groups: dict[tuple, list] = {}
        for key, v in side.items():
            groups.setdefault((key[0], key[1], base_name(v["demangled"])), []).append(key)
        return {group: keys[0] for group, keys in groups.items() if len(keys) == 1}

    base_a, base_b = by_base(only_a), by_base(only_b)
    for group, key_a in base_a.items():
        key_b = base_b.get(group)
        if key_b is not None:
            matched.append((only_a.pop(key_a), only_b.pop(key_b)))
    changed, unchanged = [], []
    for old, new in matched:
        what = [f for f in FIELDS if f != "renamed" and old[f] != new[f]]
        if old["kernel"] != new["kernel"]:
            what.insert(0, "renamed")
        entry = {"kernel": new["kernel"], "demangled": new["demangled"], "target": new["target"],
                 "image_kind": new["image_kind"], "changes": what, "before": old, "after": new}
        (changed if what else unchanged).append(entry)
    order = lambda k: (k["target"], k["image_kind"], k["kernel"])  # noqa: E731
    return {"added": sorted(only_b.values(), key=order), "removed": sorted(only_a.values(), key=order),
            "changed": sorted(changed, key=order), "unchanged": sorted(unchanged, key=order)}


def layout(params: list[dict]) -> str:
    return "[" + " ".join(f"{p['offset']}:{p['size']}" for p in params) + "]"


def change_text(entry: dict) -> str:
    a, b = entry["before"], entry["after"]
    parts = []
    for field in entry["changes"]:
        if field == "renamed":
            parts.append(f"name {a['kernel']} -> {b['kernel']}")
        elif field == "static":
            same_code = "code" not in entry["changes"] and a["code"] is not None
            parts.append(f"static {a['static']} -> {b['static']}" + (" (its own code unchanged)" if same_code else ""))
        elif field == "code":
            parts.append("code changed")
        elif field == "params":
            parts.append(f"params {layout(a['params'])} -> {layout(b['params'])}")
        else:
            name = "shared" if field == "shared_bytes" else field
            parts.append(f"{name} {a[field] if a[field] is not None else '-'} -> "
                         f"{b[field] if b[field] is not None else '-'}")
    return "; ".join(parts)


def render(result: dict, a: str, b: str, with_unchanged: bool) -> str:
    lines = [f"--- {a}", f"+++ {b}"]

    def row(mark: str, k: dict, detail: str = "") -> str:
        return f"{mark} {k['target']:<10} {k['image_kind']:<12} {k['demangled']}" + (f"  ({detail})" if detail else "")
    for k in result["removed"]:
        lines.append(row("-", k, f"static {k['static']}"))
    for k in result["added"]:
        lines.append(row("+", k, f"static {k['static']}"))
    for k in result["changed"]:
        lines.append(row("~", k, change_text(k)))
    if with_unchanged:
        for k in result["unchanged"]:
            lines.append(row("=", k))
    lines.append(f"kir: {len(result['added'])} added, {len(result['removed'])} removed, "
                 f"{len(result['changed'])} changed, {len(result['unchanged'])} unchanged")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    import kir
    from kir.report import parse_arch_filter
    archs = parse_arch_filter(args.arch)
    pattern = kernel_pattern(args.kernel) if args.kernel else None
    from kir.progress import Progress
    with Progress("decoding A, image") as progress:
        a, errors_a = kernels_of(args.a, archs, pattern, args, progress.callback)
        progress.label = "decoding B, image"
        b, errors_b = kernels_of(args.b, archs, pattern, args, progress.callback)
    result = compare(a, b)
    errors = errors_a + errors_b
    if args.json:
        import json
        print(json.dumps(envelope(SCHEMA, kir_version=kir.__version__, a=args.a, b=args.b,
                          **result, errors=errors), separators=(",", ":")))
    else:
        sys.stdout.write(render(result, args.a, args.b, args.unchanged))
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    if errors:
        return 2
    return 1 if result["added"] or result["removed"] or result["changed"] else 0


__all__ = ["add_arguments", "base_name", "change_text", "compare", "cubin_texts", "FIELDS", "kernels_of",
           "layout", "render", "run", "SCHEMA"]
