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


def container_record(container) -> dict[str, Any]:
    site = container.site
    wrapper = None
    if site.wrapper is not None:
        w = container.binary.wrappers[site.wrapper]
        wrapper = {"file_offset": w.file_offset, "version": w.version,
                   "prelinked": len(w.prelinked_offsets)}
    return {
        "index": container.index,
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


def image_record(image: Image) -> dict[str, Any]:
    e = image.entry
    return {
        "index": image.index,
        "container": image.container.index,
        "entry": e.index,
        "kind": image.kind,
        "arch": image.arch,
        "version": [e.major, e.minor],
        "compression": image.compression,
        "size": image.size,
        "stored_size": image.stored_size,
        "file_offset": e.payload_file_offset,
        "flags": e.flag_names,
        "obfuscated": e.obfuscated,
        "identifier": e.identifier,
        "options": options_text(e.options),
    }


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


def build_report(binary: Binary, images: Iterable[Image], with_kernels: bool,
                 errors: Iterable[str] = ()) -> dict[str, Any]:
    images = list(images)
    used = sorted({i.container.index for i in images})
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "kir_version": _core.__version__,
        "path": binary.path,
        "format": binary.format,
        "members": binary.members,
        "containers": [container_record(binary.containers[i]) for i in used],
        "images": [],
    }
    for image in images:
        record = image_record(image)
        if with_kernels and image._code is not None:
            record.update(code_records(image._code))
        elif with_kernels:
            record.update({"kernels": [], "functions": [], "globals": []})
        report["images"].append(record)
    report["errors"] = list(errors)
    return report
