"""OpenMP target regions at run time (issue 27): a launch of an `__omp_offloading_*`
kernel, which libomptarget's plugin loads as a device image of its own
(`cuModuleLoadDataEx`) and launches with `cuLaunchKernel`, associated with the LLVM IR
of its region, so that its record replays from the IR (`kir replay --code ir`) and
`kir tune` compiles variants of it.

The hook sees the image libomptarget loads, which holds no IR. The IR is looked for in
the executable (clang's `-fopenmp-target-jit` embeds the linked device module in
`.llvm.offloading`) and in the files given to `kir record --ir` (a bitcode file, an
object with IR in `.llvm.offloading`, any binary kir opens), and matched by **region
identity** (docs/hashing.md: the kernel name with its source file's device and inode
ids written 0), so IR from another build of the same source — another checkout, another
machine — is found too; a module whose kernel is named for that other build is stored
with the kernel renamed to the launched name."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kir.errors import KirError

__all__ = ["RegionIR", "attach_region_ir", "region_key", "region_modules"]


def region_key(name: str) -> str | None:
    """The region identity's name part (`kir.hashing.omp_region(name).normalized`), or
    None when `name` is not an OpenMP region's kernel."""
    from kir.hashing import omp_region
    region = omp_region(name)
    return region.normalized if region is not None else None


@dataclass
class RegionIR:
    kernel: str      #: the kernel's name in the module (its build's ids)
    bitcode: bytes   #: the module that defines it
    source: str      #: where it was found, for people


def region_modules(paths) -> dict[str, RegionIR]:
    """region key -> the first IR module (in the order of `paths`) defining a kernel of
    that region. A path kir cannot open raises KirError naming it; a module llvmlite
    cannot read is skipped."""
    import kir
    from kir.ir import ir_modules
    found: dict[str, RegionIR] = {}
    for path in paths:
        try:
            binary = kir.open(str(path))
        except (KirError, OSError) as error:
            raise KirError(f"--ir {path}: {error}") from None
        for module in ir_modules(binary):
            if module.error:
                continue
            for function in module.kernels:
                key = region_key(function.name)
                if key is not None and key not in found:
                    found[key] = RegionIR(function.name, module.bitcode, f"{path}: {module.source}")
    return found


def _rename(bitcode: bytes, old: str, new: str) -> bytes:
    """(in kir's LLVM worker) `bitcode` with function `old` named `new`."""
    import llvmlite.binding as llvm
    module = llvm.parse_bitcode(bitcode)
    module.get_function(old).name = new
    return module.as_bitcode()


def attach_region_ir(directory, paths, records=None) -> tuple[list[tuple[Path, str]], list[str]]:
    """Give every record of the recording in `directory` (or only the record files
    `records`) whose kernel is an OpenMP region and which holds no IR the IR of its
    region found in `paths` (kir.record.attach_ir). Returns ([(record path, where its
    IR was found)], [the region kernels no path defines])."""
    from kir.record import Record, Recording, attach_ir
    loaded = Recording(directory).records() if records is None else [Record.load(p) for p in records]
    records = [r for r in loaded if r.kernel.ir is None and region_key(r.kernel.name)]
    if not records:
        return [], []
    modules = region_modules(paths)
    attached, missing = [], []
    for record in records:
        found = modules.get(region_key(record.kernel.name))
        if found is None:
            missing.append(record.kernel.name)
            continue
        bitcode = found.bitcode
        if found.kernel != record.kernel.name:  # another build's ids: named as launched
            from kir._irworker import call
            bitcode = call("kir.omp:_rename", bitcode, found.kernel, record.kernel.name)
        attach_ir(record.path, bitcode)
        attached.append((record.path, found.source))
    return attached, sorted(set(missing))
