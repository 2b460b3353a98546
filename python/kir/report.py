"""What `kir inspect` prints: the JSON report (the schema, docs/json-schema.md)
and the text table, both from the same records.

The records are built by the core bindings in one call per binary
(bindings/records.cpp: `image_records`, `container_records`,
`DeviceCode.records`); all text is rendered here, in Python.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator

from kir import _core
from kir.binary import Binary, Image
from kir.envelope import envelope
from kir.errors import OptionError
from kir.model import ImageKind
from kir.words import plural

SCHEMA = "kir.inspect/3"


def parse_arch_filter(text: str | None) -> set[str] | None:
    """'sm_90,80,compute_75,gfx90a:xnack+' -> {'sm_90', 'sm_80', 'sm_75', 'gfx90a'}
    (processors, as `processor()` names them); None when no filter."""
    if not text:
        return None
    archs = set()
    for part in (p.strip() for p in text.split(",")):
        digits = part.rsplit("_", 1)[-1]
        if digits.isdigit():
            archs.add(f"sm_{digits}")
        elif part.startswith("gfx") and len(part) > 3:
            archs.add(processor(part))
        else:
            raise OptionError(f"invalid architecture '{part}': expected e.g. sm_90, 90 or gfx90a")
    return archs


def processor(target: str) -> str:
    """The processor of a target id: 'gfx90a:xnack+' -> 'gfx90a'; 'sm_90' as is."""
    return target.split(":", 1)[0]


#: The kinds --kind accepts.
KINDS = (ImageKind.cubin, ImageKind.ptx, ImageKind.lto_ir, ImageKind.old_cubin,
         ImageKind.code_object, ImageKind.bitcode, ImageKind.host, ImageKind.object)


def parse_kind_filter(text: str | None) -> set[ImageKind] | None:
    """'cubin,ptx' -> {ImageKind.cubin, ImageKind.ptx}; None when no filter."""
    if not text:
        return None
    kinds = set()
    for part in (p.strip() for p in text.split(",")):
        if part not in KINDS:
            raise OptionError(f"invalid image kind '{part}': expected one of {', '.join(KINDS)}")
        kinds.add(ImageKind(part))
    return kinds


def selected(target: str, kind: str, archs: set[str] | None, kinds: set[ImageKind] | None) -> bool:
    """Whether an image of `target` and `kind` passes --arch `archs` and --kind `kinds`
    (None: any) — the one filter of inspect, extract, hash and diff."""
    return (archs is None or processor(target) in archs) and (kinds is None or kind in kinds)


def selected_images(binary: Binary, archs: set[str] | None,
                    kinds: set[ImageKind] | None = None) -> list[Image]:
    return [i for i in binary.images if selected(i.target, i.kind, archs, kinds)]


class KernelsText:
    """Images' kernel lists as JSON text built by the core (DeviceCode.kernels_json:
    no dict per kernel and parameter, issue 15), written by `parts` in place in the JSON of
    a report whose "kernels" build_report left as placeholders."""

    def __init__(self) -> None:
        import os
        self._texts: list[str] = []
        self._tag = os.urandom(8).hex()  # no path or name in a report holds it by chance

    def placeholder(self, text: str) -> str:
        self._texts.append(text)
        return f"@@kir-kernels-{self._tag}-{len(self._texts) - 1}@@"

    def parts(self, obj) -> Iterator[str]:
        """json.dumps(obj, separators=(",", ":")) in parts, each placeholder's text a
        part of its own: written as they come, the JSON of a large library's kernels
        is never joined into one string (issue 15)."""
        import json
        text = json.dumps(obj, separators=(",", ":"))
        if not self._texts:
            yield text
            return
        import re
        at = 0
        for m in re.finditer(f'"@@kir-kernels-{self._tag}-([0-9]+)@@"', text):
            yield text[at:m.start()]
            yield self._texts[int(m.group(1))]
            at = m.end()
        yield text[at:]



def build_report(binary: Binary, archs: set[str] | None, kinds: set[ImageKind] | None,
                 with_kernels: bool, errors: Iterable[str] = (), modules=None,
                 links: dict | None = None, kernels_text: KernelsText | None = None) -> dict[str, object]:
    """The inspect report; with_kernels expects binary.load_code() to have run.

    `modules` (kir.ir.IrModule list) adds "ir_modules"; `links` ((image, kernel)
    -> module index) gives each kernel its "ir_module". With `kernels_text`, each
    image's "kernels" is a placeholder for its JSON text, which only
    `kernels_text.parts` of the report turns into the list; without kernels, so are
    "images" and "containers" (the core's image_records_json: the same bytes)."""
    core = binary._check_open()
    if not with_kernels and kernels_text is not None:  # the listing: its JSON text from the core
        rows = selected_rows(binary, archs, kinds)
        filtered = archs is not None or kinds is not None
        images = core.image_records_json([r[0] for r in rows] if filtered else None)
        containers = core.container_records_json(sorted({r[1] for r in rows}))
        if images is not None and containers is not None:  # else a text json.dumps escapes: the dicts
            return envelope(SCHEMA, kir_version=_core.__version__, path=binary.path, format=binary.format,
                            members=binary.members, containers=kernels_text.placeholder(containers),
                            images=kernels_text.placeholder(images), errors=list(errors),
                            **({"ir_modules": [ir_module_record(m) for m in modules]} if modules is not None
                               else {}))
    records = core.image_records()
    for r in records:  # the name `kir hash --json` gives the same value (issue 26: arch vs target)
        r["target"] = r["arch"]
    if archs is not None or kinds is not None:
        records = [r for r in records if selected(r["arch"], r["kind"], archs, kinds)]
    containers = core.container_records()
    used = sorted({r["container"] for r in records})
    if with_kernels:
        images = binary.images
        by_image: dict[int, dict[str, int]] = {}
        if kernels_text is not None:
            for (image, name), module in (links or {}).items():
                by_image.setdefault(image, {})[name] = module
        for r in records:
            code = images[r["index"]]._code or _core.DeviceCode()
            if kernels_text is not None:
                text = code.kernels_json(by_image.get(r["index"], {}))
                if text is not None:  # else a name needs json.dumps's escaping: the dicts below
                    r.update(code.records(kernels=False))
                    r["kernels"] = kernels_text.placeholder(text)
                    continue
            r.update(code.records())
            for k in r["kernels"]:
                k["ir_module"] = (links or {}).get((r["index"], k["name"]))
    return envelope(
        SCHEMA,
        kir_version=_core.__version__,
        path=binary.path,
        format=binary.format,
        members=binary.members,
        containers=[containers[i] for i in used],
        images=records,
        errors=list(errors),
        **({"ir_modules": [ir_module_record(m) for m in modules]} if modules is not None else {}),
    )


def ir_module_record(m) -> dict[str, object]:
    """An IR module as `kir inspect --ir --json` prints it."""
    return {
        "index": m.index,
        "image": m.image,
        "source": m.source,
        "embedded": m.embedded,
        "size": len(m.bitcode),
        "triple": m.triple,
        "data_layout": m.data_layout,
        "error": m.error or None,
        "functions": [{
            "name": f.name,
            "kernel": f.is_kernel,
            "calling_convention": f.calling_convention,
            "declaration": f.is_declaration,
            "jit": f.jit,
            "jit_args": f.jit_args,
            "omp_region": f.omp_region or None,
            "params": [{"type": p.type, "store_size": p.store_size, "pointee": p.pointee_kind,
                        "pointee_type": p.pointee_type, "pointee_size": p.pointee_size}
                       for p in f.params],
        } for f in m.functions if not f.name.startswith("llvm.")],
        "globals": [{"name": g.name, "type": g.type, "size": g.size} for g in m.globals],
    }


# --- the text table ---------------------------------------------------------------------

TABLE_HEADER = "image  kind        target         version  compression  stored      size        identifier"


def render_table(binary: Binary, archs: set[str] | None = None, kinds: set[str] | None = None,
                 codes=(), notes: dict | None = None, kernel_filter=None) -> str:
    """The `kir inspect` table of the images for `archs` (processors) and of `kinds`
    (None: all); `codes[i]`, when given and not None, adds the kernels of image i,
    each followed by its note from `notes` ((image index, mangled name) -> text);
    `kernel_filter(name, demangled)`, when given, keeps only the kernels it accepts."""
    return "".join(table_parts(binary, archs, kinds, codes, notes, kernel_filter))


def table_parts(binary: Binary, archs: set[str] | None = None, kinds: set[str] | None = None,
                codes=(), notes: dict | None = None, kernel_filter=None) -> Iterator[str]:
    """render_table's text in parts (the header, then a part per image), for a
    caller that writes them as they come: the table of libtorch_cuda.so's 130,498
    kernels (80 MB) is then never held whole, nor encoded whole (issue 15)."""
    notes = notes or {}
    rows = selected_rows(binary, archs, kinds)
    matched = None  # with a kernel filter: {image: its kernels' lines}, only images with a match
    if kernel_filter is not None:
        matched = {}
        for r in rows:
            code = codes[r[0]] if r[0] < len(codes) else None
            if code is not None and (found := kernel_lines(code, r[0], notes, kernel_filter)):
                matched[r[0]] = found
        rows = [r for r in rows if r[0] in matched]
    used = sorted({r[1] for r in rows})
    counts: dict[str, int] = {}
    for r in rows:
        counts[r[2]] = counts.get(r[2], 0) + 1
    summary = ", ".join(f"{n} {kind}" for kind, n in sorted(counts.items()))
    yield (f"{binary.path}: {binary.format}, {plural(len(used), 'container')}, {plural(len(rows), 'image')}"
           + (f" ({summary})" if summary else "") + (" with a matching kernel" if matched is not None else "")
           + "\n")
    if not rows:
        return
    containers = binary._check_open().container_records()
    lines = [TABLE_HEADER]
    current = None
    for r in rows:
        if r[1] != current:
            current = r[1]
            lines.append(container_line(containers[current]))
        lines.append(image_row_line(*r))
        code = codes[r[0]] if r[0] < len(codes) else None
        if code is not None:
            lines.extend(matched[r[0]] if matched is not None else kernel_lines(code, r[0], notes))
            yield "\n".join(lines) + "\n"
            lines = []
    if lines:
        yield "\n".join(lines) + "\n"


def selected_rows(binary: Binary, archs: set[str] | None = None, kinds: set[str] | None = None) -> list[tuple]:
    """The core's image rows (Binary.image_rows: plain tuples, no object per image)
    of the images for `archs` (processors) and of `kinds` (None: all)."""
    rows = binary._check_open().image_rows()
    if archs is not None or kinds is not None:
        rows = [r for r in rows if selected(r[3], r[2], archs, kinds)]
    return rows


def container_line(c: dict) -> str:
    line = f"-- container {c['index']}: {c['format']}"
    if c["format"] == "device-elf":  # the file is the image
        return f"{line}: the whole file, {c['size']} bytes"
    if c["compression"]:
        line += f" ({c['compression']})"
    line += " in " + (f"{c['member']}:" if c["member"] else "") + (c["section"] or "(no section)")
    line += f" at {c['file_offset']:#x}, {c['size']} bytes, found by {c['found_by']}"
    if c["wrapper"]:
        line += f", wrapper v{c['wrapper']['version']} at {c['wrapper']['file_offset']:#x}"
    return line


def image_row_line(index, container, kind, arch, version, compression, stored, size, ident, obfuscated) -> str:
    """The table line of an image row (Binary.image_rows' tuple)."""
    line = (f"{index:<6} {kind:<11} {arch or '-':<14} {version or '-':<8} {compression:<12} "
            f"{stored:<11} {size:<11} ")
    line += ident  # a fatbin entry's identifier, or an offload bundle entry's id (issue 26: HIP's showed only in JSON)
    if obfuscated:
        line += (" " if ident else "") + "(obfuscated)"
    return line.rstrip(" ")


def kernel_lines(code, image: int, notes: dict, kernel_filter=None) -> list[str]:
    """The table's lines of a kernel each (its two lines joined by a newline), from
    the core's rows of plain values (DeviceCode.kernel_rows: no Python object per
    kernel and parameter, issue 15); `kernel_filter(name, demangled)`, when given,
    keeps only the kernels it accepts; `notes` ((image, name) -> text) end a
    kernel's second line."""
    rows = code.kernel_rows()
    if kernel_filter is not None:
        rows = [row for row in rows if kernel_filter(row[0], row[1])]
    # One f-string per kernel, in a comprehension: the table of libtorch_cuda.so's
    # 130,498 kernels is the command's serial part.
    lines = [f"         kernel {demangled}\n           {name}  params[{count}]{layout}"
             + ("" if registers is None else f"  (regs {registers}, shared {shared})" if shared
                else f"  (regs {registers})")
             for name, demangled, count, layout, registers, shared in rows]
    if notes:
        for i, row in enumerate(rows):
            note = notes.get((image, row[0]))
            if note is not None:
                lines[i] += f"  {note}"
    return lines


__all__ = ["build_report", "container_line", "image_row_line", "ir_module_record", "kernel_lines",
           "KernelsText", "KINDS", "parse_arch_filter", "parse_kind_filter", "processor", "render_table", "SCHEMA",
           "selected", "selected_images", "selected_rows", "table_parts", "TABLE_HEADER"]
