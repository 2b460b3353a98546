"""LLVM IR to PTX, with llvmlite: the code `kir replay --code ir` loads. A module
that calls libdevice (`__nv_*`) is linked with the toolkit's libdevice."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from kir.errors import PlanError

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"


def libdevice_calls(bitcode: bytes) -> list[str]:
    """The libdevice functions (`__nv_*`) a module declares without defining."""
    module = _parse_bitcode(bitcode)
    return sorted(f.name for f in module.functions if f.is_declaration and f.name.startswith("__nv_"))


def find_libdevice(calls=()) -> Path:
    """$CUDA_HOME/nvvm/libdevice/libdevice.10.bc (CUDA_HOME defaults to /usr/local/cuda)."""
    home = Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda")
    path = home / "nvvm" / "libdevice" / "libdevice.10.bc"
    if not path.is_file():
        needed = f"the IR calls {', '.join(calls[:3])}: " if calls else ""
        raise PlanError(f"{needed}libdevice is not at {path} (set CUDA_HOME to the CUDA toolkit)")
    return path


@lru_cache(maxsize=8)
def compile_ir(bitcode: bytes, arch: str = "sm_90", libdevice: Path | None = None, opt: int = 3) -> str:
    """PTX for an LLVM bitcode module: triple set to NVPTX if it has none, libdevice
    linked in (its functions internalized, so unused ones are dropped), the O`opt`
    pipeline run, then code generation for `arch`. Cached: it is CPU work."""
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = _parse_bitcode(bitcode)
    if not module.triple.startswith("nvptx"):
        if module.triple:
            raise PlanError(f"the IR is for {module.triple}, not NVPTX")
        module.triple = NVPTX_TRIPLE
    machine = llvm.Target.from_triple(module.triple).create_target_machine(cpu=arch, opt=opt)
    if libdevice is not None:
        _link_libdevice(module, libdevice)
    builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=opt))
    builder.getModulePassManager().run(module, builder)
    return machine.emit_assembly(module)


def _parse_bitcode(bitcode: bytes):
    import llvmlite.binding as llvm
    try:
        return llvm.parse_bitcode(bitcode)
    except Exception as error:  # llvmlite raises RuntimeError with LLVM's message
        raise PlanError(f"llvmlite (LLVM {'.'.join(map(str, llvm.llvm_version_info))}) cannot read "
                        f"the record's IR: {str(error).strip()}") from None


def _link_libdevice(module, path: Path) -> None:
    import llvmlite.binding as llvm
    from kir.files import read_file
    from kir.record import MAX_CHUNK_BYTES
    library = llvm.parse_bitcode(read_file(path, f"libdevice {path}", MAX_CHUNK_BYTES, PlanError))
    library.triple = module.triple
    library.data_layout = module.data_layout
    module.link_in(library)
    for function in module.functions:
        if function.name.startswith("__nv_") and not function.is_declaration:
            function.linkage = llvm.Linkage.internal


__all__ = ["compile_ir", "find_libdevice", "libdevice_calls", "NVPTX_TRIPLE"]
