"""The content `kir inspect` shows, as plain data (the JSON schema, docs/json-schema.md).

The table and the JSON output are both rendered from this one structure, so
they always carry the same content.
"""
from __future__ import annotations

from typing import Any, Iterable, Optional

from kir import _core
from kir.binary import Binary, Image

SCHEMA = "kir.inspect/1"


def parse_arch_filter(text: Optional[str]) -> Optional[set[int]]:
    """'sm_90,80,compute_75' -> {90, 80, 75}; None when no filter."""
    if not text:
        return None
    archs = set()
    for part in text.split(","):
        digits = part.strip().rsplit("_", 1)[-1]
        if not digits.isdigit():
            raise ValueError(f"invalid architecture '{part.strip()}': expected e.g. sm_90 or 90")
        archs.add(int(digits))
    return archs


def selected_images(binary: Binary, archs: Optional[set[int]]) -> list[Image]:
    return [i for i in binary.images if archs is None or i.entry.arch in archs]


def container_record(index: int, site: _core.Container,
                     wrappers: list[_core.FatbinWrapper]) -> dict[str, Any]:
    wrapper = None
    if site.wrapper is not None:
        w = wrappers[site.wrapper]
        wrapper = {"file_offset": w.file_offset, "version": w.version,
                   "prelinked": len(w.prelinked_offsets)}
    return {
        "index": index,
        "member": site.member,
        "section": site.section,
        "file_offset": site.file_offset,
        "size": site.total_size,
        "version": site.version,
        "found_by": site.found_by,
        "wrapper": wrapper,
    }


def options_text(raw: bytes) -> str:
    """Options as text when they are text; binary blobs (sm_100+) as hex."""
    text = raw.rstrip(b"\0")
    if all(32 <= b < 127 for b in text):
        return text.decode().strip()
    return "hex:" + raw.hex()


ROW_KEYS = ("container", "entry", "kind", "arch", "version_major", "version_minor",
            "compression", "size", "stored_size", "file_offset", "flags", "obfuscated",
            "identifier", "options")


def image_records(binary: Binary) -> list[dict[str, Any]]:
    """One record per image, from a single call into the core (the fast path)."""
    flag_names: dict[int, list[str]] = {}
    options: dict[bytes, str] = {}
    records = []
    for index, row in enumerate(binary._core.image_rows()):
        r = dict(zip(ROW_KEYS, row))
        flags = r["flags"]
        if flags not in flag_names:
            flag_names[flags] = _core.fatbin_flag_names(flags)
        if r["options"] not in options:
            options[r["options"]] = options_text(r["options"])
        records.append({
            "index": index, "container": r["container"], "entry": r["entry"],
            "kind": r["kind"], "arch": f"sm_{r['arch']}",
            "version": [r["version_major"], r["version_minor"]],
            "compression": r["compression"], "size": r["size"],
            "stored_size": r["stored_size"], "file_offset": r["file_offset"],
            "flags": flag_names[flags], "obfuscated": r["obfuscated"],
            "identifier": r["identifier"], "options": options[r["options"]],
        })
    return records


def kernel_record(kernel: _core.Kernel) -> dict[str, Any]:
    return {
        "name": kernel.name,
        "demangled": kernel.demangled,
        "params": [{"ordinal": p.ordinal, "offset": p.offset, "size": p.size}
                   for p in kernel.params],
        "param_bytes": kernel.param_bytes,
        "registers": kernel.registers,
        "shared_bytes": kernel.shared_bytes,
        "frame_bytes": kernel.frame_bytes,
        "max_threads": list(kernel.max_threads) if kernel.max_threads else None,
        "cluster_dims": list(kernel.cluster_dims) if kernel.cluster_dims else None,
    }


def code_records(code: _core.DeviceCode) -> dict[str, Any]:
    return {
        "kernels": [kernel_record(k) for k in code.kernels],
        "functions": list(code.functions),
        "globals": [{"name": g.name, "section": g.section, "size": g.size} for g in code.globals],
    }


def build_report(binary: Binary, archs: Optional[set[int]], with_kernels: bool,
                 errors: Iterable[str] = ()) -> dict[str, Any]:
    """The inspect report; with_kernels expects binary.load_code() to have run."""
    records = [r for r in image_records(binary)
               if archs is None or int(r["arch"][3:]) in archs]
    sites = binary._core.containers
    wrappers = binary.wrappers
    used = sorted({r["container"] for r in records})
    if with_kernels:
        images = binary.images
        for r in records:
            code = images[r["index"]]._code
            r.update(code_records(code) if code is not None
                     else {"kernels": [], "functions": [], "globals": []})
    return {
        "schema": SCHEMA,
        "kir_version": _core.__version__,
        "path": binary.path,
        "format": binary.format,
        "members": binary.members,
        "containers": [container_record(i, sites[i], wrappers) for i in used],
        "images": records,
        "errors": list(errors),
    }
