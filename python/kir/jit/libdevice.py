"""libdevice, the CUDA toolkit's bitcode math library (`__nv_sinf`, ...): a module
built with -nocudalib calls its functions without defining them, and kir.jit links
it in before optimizing (its functions internalized, so unused ones are dropped
and the called ones inlined). The replay planner asks which functions a record's
IR calls (`calls_in`) and where libdevice is (`find`) before anything compiles.

The errors are `error` (a KirError subclass: the replay's PlanError), KirError by
default."""
from __future__ import annotations

import os
from pathlib import Path

from kir.errors import KirError

PREFIX = "__nv_"


def called(module) -> list[str]:
    """The libdevice functions a module (llvmlite's, or kir.ir's IrModule) declares
    without defining."""
    return sorted(f.name for f in module.functions if f.is_declaration and f.name.startswith(PREFIX))


def calls_in(bitcode: bytes, what: str = "the module", error: type[KirError] = KirError) -> list[str]:
    """`called` of the module in `bitcode`, read in kir's LLVM worker (kir.ir.read_module)."""
    from kir.ir import read_module
    module = read_module(bitcode)
    if module.error:
        raise error(module.error.replace("this module", what, 1))
    return called(module)


def find(calls=(), error: type[KirError] = KirError) -> Path:
    """$CUDA_HOME/nvvm/libdevice/libdevice.10.bc (CUDA_HOME defaults to /usr/local/cuda);
    `calls` name what needs it in the error when it is not there."""
    home = Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda")
    path = home / "nvvm" / "libdevice" / "libdevice.10.bc"
    if not path.is_file():
        needed = f"the IR calls {', '.join(calls[:3])}: " if calls else ""
        raise error(f"{needed}libdevice is not at {path} (set CUDA_HOME to the CUDA toolkit)")
    return path


def link(module, path: Path, error: type[KirError] = KirError) -> None:
    """Link libdevice at `path` into the llvmlite `module` (in kir's LLVM worker), its
    functions internal."""
    import llvmlite.binding as llvm

    from kir.files import read_file
    from kir.record import MAX_CHUNK_BYTES
    library = llvm.parse_bitcode(read_file(path, f"libdevice {path}", MAX_CHUNK_BYTES, error))
    library.triple = module.triple
    library.data_layout = module.data_layout
    module.link_in(library)
    for function in module.functions:
        if function.name.startswith(PREFIX) and not function.is_declaration:
            function.linkage = llvm.Linkage.internal


__all__ = ["called", "calls_in", "find", "link", "PREFIX"]
