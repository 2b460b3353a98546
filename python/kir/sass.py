"""SASS of a cubin's kernels through NVIDIA's nvdisasm (`kir inspect --sass`, issue 26):
what `cuobjdump -sass` / `nvdisasm` users expect, per image and kernel. nvdisasm comes
from a CUDA toolkit on PATH or from the nvidia-cuda-nvdisasm wheel (the `sass` extra)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kir.errors import KirError, missing_extra

#: Where a function's code starts in nvdisasm's output: its section's header.
_SECTION = re.compile(r'^\s*\.section\s+\.text\.(?P<name>[^,\s]+)', re.M)
_ANY_SECTION = re.compile(r'^\s*\.section\s|^//-{5,} ', re.M)  # the next section, or its banner


def find_cuda_tool(name: str) -> str | None:
    """A CUDA toolkit binary (nvdisasm, cuobjdump) on PATH, else the one an NVIDIA wheel
    installs (nvidia-cuda-nvdisasm: nvidia/cu13/bin, nvidia/cuda_nvdisasm/bin for 12.x);
    None when neither has it."""
    found = shutil.which(name)
    if found:
        return found
    try:
        import nvidia
    except ImportError:
        return None
    for base in getattr(nvidia, "__path__", []):
        for candidate in sorted(Path(base).glob(f"*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return str(candidate)
    return None


def find_nvdisasm() -> str:
    """nvdisasm (find_cuda_tool); KirError naming the extra that installs it."""
    found = find_cuda_tool("nvdisasm")
    if found is None:
        raise missing_extra("nvdisasm", "sass", "kir inspect --sass (or a CUDA toolkit's nvdisasm on PATH)")
    return found


def disassemble(cubin: bytes, kernels: list[str], nvdisasm: str | None = None) -> dict[str, str]:
    """{kernel: its SASS as nvdisasm prints its .text section} for each of `kernels` (mangled)
    that `cubin` holds. KirError with nvdisasm's message when it refuses the cubin."""
    tool = nvdisasm or find_nvdisasm()
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        run = subprocess.run([tool, "-c", f.name], capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        raise KirError(f"nvdisasm: {(run.stderr or run.stdout).strip().splitlines()[-1:] or ['failed']}")
    text, wanted, out = run.stdout, set(kernels), {}
    for m in _SECTION.finditer(text):
        if m["name"] in wanted:
            end = _ANY_SECTION.search(text, m.end())
            out[m["name"]] = text[m.start():end.start() if end else len(text)].rstrip() + "\n"
    return out


__all__ = ["disassemble", "find_cuda_tool", "find_nvdisasm"]
