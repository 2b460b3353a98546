"""LLVM IR to PTX, with llvmlite (in kir's LLVM worker, kir/_irworker.py): the code
`kir replay --code ir` loads. A module that calls libdevice (`__nv_*`) is linked
with the toolkit's libdevice."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from kir.errors import LLVMCrashError, PlanError

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"


def libdevice_calls(bitcode: bytes) -> list[str]:
    """The libdevice functions (`__nv_*`) a module declares without defining."""
    from kir.ir import read_module
    module = read_module(bitcode)  # in kir's LLVM worker
    if module.error:
        raise PlanError(module.error.replace("this module", "the record's IR", 1))
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
    pipeline run, then code generation for `arch`. Cached: it is CPU work. Run in
    kir's LLVM worker (kir/_irworker.py): IR LLVM cannot compile may end the process."""
    from kir import _irworker
    try:
        return _irworker.call("kir.replay.compiler:_compile_ir", bitcode, arch, libdevice, opt)
    except LLVMCrashError as died:
        raise PlanError(f"{died} compiling the record's IR for {arch}") from None


def _compile_ir(bitcode: bytes, arch: str, libdevice: Path | None, opt: int) -> str:
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
    from kir.errors import KirError
    from kir.ir import parse_bitcode
    try:
        return parse_bitcode(bitcode, "the record's IR")
    except KirError as error:
        raise PlanError(str(error)) from None


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
