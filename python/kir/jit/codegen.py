"""PTX from an llvmlite module (LLVM's NVPTX back end), and a cubin from PTX:
nvJitLink (cuda-bindings `cuda.bindings.nvjitlink`, when its library loads) or
`ptxas` (on PATH, else $CUDA_HOME/bin, else /usr/local/cuda/bin). Both are asked
for their verbose info log, which gives the resource usage; kir's own cubin
parser (libkir, `kir.parse_cubin`) reads registers, shared memory, stack frame
and code size from the cubin's `.nv.info` and symbol table as well."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kir.errors import KirError, OptionError, install_hint, missing_extra

NVPTX_TRIPLE = "nvptx64-nvidia-cuda"
_ARCH = re.compile(r"sm_(\d+)([af]?)")


def check_arch(arch: str) -> str:
    if not isinstance(arch, str) or not _ARCH.fullmatch(arch):
        raise OptionError(f"arch {arch!r}: expected sm_NN, e.g. sm_90 (sm_90a, sm_100f), or an AMDGPU "
                          "target-id, e.g. gfx942, gfx90a:xnack+")
    return arch


def target_machine(arch: str, features: str, opt: int):
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    target = llvm.Target.from_triple(NVPTX_TRIPLE)
    return target.create_target_machine(cpu=arch, features=features, opt=opt)


def emit_ptx(module, machine, fp_contract: str = "on") -> str:
    """PTX of `module`. fp_contract "fast" is clang's CUDA back end with
    TargetOptions::AllowFPOpFusion = Fast (clang -ffp-contract=fast): NVPTX may fuse
    any multiply and add and prints the operations it leaves unfused without `.rn`,
    so ptxas may fuse them too. llvmlite cannot set AllowFPOpFusion; NVPTX's own
    option -nvptx-fma-level=1 has the same effect (NVPTXTargetLowering::allowFMA),
    and 0 is llvmlite's FPOpFusion::Standard (only `contract` operations and
    llvm.fmuladd fused; the rest printed `.rn`, which ptxas never fuses)."""
    import llvmlite.binding as llvm
    llvm.set_option("kir", f"-nvptx-fma-level={1 if fp_contract == 'fast' else 0}")
    try:
        return machine.emit_assembly(module)
    except RuntimeError as error:
        raise KirError(f"LLVM's NVPTX back end failed: {str(error).strip()}") from None


@dataclass
class Resources:
    """Resource usage of the compiled kernel. None: not reported by the tool used."""
    registers: int | None = None
    barriers: int | None = None
    stack_frame: int | None = None     #: bytes per thread
    spill_stores: int | None = None    #: bytes
    spill_loads: int | None = None     #: bytes
    shared_bytes: int | None = None    #: static shared memory
    local_bytes: int | None = None
    constant_bytes: dict[str, int] = field(default_factory=dict)  #: "cmem[0]" -> bytes
    code_bytes: int | None = None      #: the kernel's machine code (cubin)
    max_threads: list[int] | None = None  #: .maxntid as the cubin records it
    tool: str = ""                     #: "ptxas 13.0", "nvJitLink 13.5", "" for PTX only
    log: str = ""                      #: the tool's info log

    def meta(self) -> dict[str, str]:
        out = {}
        for key, value in asdict(self).items():
            if key == "log" or value is None or value == {} or value == "":
                continue
            if key == "constant_bytes":
                value = ",".join(f"{k}={v}" for k, v in value.items())
            elif key == "max_threads":
                value = ",".join(map(str, value))
            out[f"resources.{key}"] = str(value)
        return out


_USED = re.compile(r"\bused (\d+) registers", re.I)
_BARRIERS = re.compile(r"\bused (\d+) barriers", re.I)
_BYTES = re.compile(r"(\d+) bytes (smem|lmem|cmem\[\d+\])")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
#: nvJitLink's own summary line: "used 10 registers, used 0 barriers, 0 stack, 0 bytes smem, ..."
_STACK = re.compile(r"\bused \d+ registers,.* (\d+) stack\b", re.I)


def parse_info_log(log: str, entry: str, resources: Resources) -> None:
    """The lines of a ptxas -v / nvJitLink -verbose info log about `entry`. The
    first value of each field wins: nvJitLink repeats the ptxas lines, then adds
    a summary of its own (in which the constant bank and local memory appear)."""
    def first(name: str, value: int) -> None:
        if getattr(resources, name) is None:
            setattr(resources, name, value)

    mine = False
    for line in log.splitlines():
        if "Compiling entry function" in line or "Function properties for" in line:
            stripped = line.rstrip().rstrip(":")
            mine = f"'{entry}'" in line or stripped.endswith(f" {entry}")
            continue
        if not mine:
            continue
        frame = _FRAME.search(line)
        if frame:
            for name, value in zip(("stack_frame", "spill_stores", "spill_loads"), map(int, frame.groups())):
                first(name, value)
        stack = _STACK.search(line)
        if stack:
            first("stack_frame", int(stack[1]))
        used = _USED.search(line)
        if used:
            first("registers", int(used[1]))
            barriers = _BARRIERS.search(line)
            if barriers:
                first("barriers", int(barriers[1]))
            for size, kind in _BYTES.findall(line):
                if kind == "smem":
                    first("shared_bytes", int(size))
                elif kind == "lmem":
                    first("local_bytes", int(size))
                else:
                    resources.constant_bytes.setdefault(kind, int(size))


def complete_spills(resources: Resources) -> None:
    """Spill stores and loads when the log gave none: spilled registers live in the
    stack frame, so a kernel whose frame is 0 bytes spills nothing. nvJitLink keeps
    the cubins it made in the driver's compute cache (~/.nv/ComputeCache; not with
    CUDA_CACHE_DISABLE=1): on a hit ptxas does not run and the info log has only
    nvJitLink's own summary (issue 23: "spill stores None / loads None" in 4 of 5
    `kir jit compile` runs on the H200, nvJitLink 13.0: every run after the first);
    the summary and the cubin still give the frame. With a frame and no ptxas line
    the spills stay None."""
    if resources.stack_frame == 0:
        for name in ("spill_stores", "spill_loads"):
            if getattr(resources, name) is None:
                setattr(resources, name, 0)


def elf_sections(data: bytes) -> dict[str, int]:
    """Section name -> size of an ELF64 little-endian file (a cubin)."""
    import struct
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise KirError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_offset = headers[shstrndx][4]
    out = {}
    for h in headers:
        start = names_offset + h[0]
        name = data[start:data.index(b"\0", start)].decode(errors="replace")
        out[name] = h[5]
    return out


def from_cubin(cubin: bytes, entry: str, resources: Resources) -> None:
    """What the cubin itself records, through kir's cubin parser (libkir: registers,
    shared memory as the loader reserves it, stack frame, code size, .maxntid)
    and its section table (constant banks `.nv.constantN[.entry]`, local memory
    `.nv.local.entry`): these override or complete the tool's log."""
    from kir import _core
    try:
        code = _core.parse_cubin(cubin)
    except Exception as error:  # a KirError from the core: the tool made a cubin kir cannot read
        raise KirError(f"kir cannot read the cubin it just built: {error}") from None
    kernel = next((k for k in code.kernels if k.name == entry), None)
    if kernel is None:
        raise KirError(f"the cubin has no kernel {entry} (it has: "
                       f"{', '.join(k.name for k in code.kernels) or 'none'})")
    if kernel.registers is not None:
        resources.registers = kernel.registers
    if kernel.shared_bytes is not None:
        resources.shared_bytes = kernel.shared_bytes
    if resources.stack_frame is None:
        resources.stack_frame = kernel.frame_bytes
    resources.code_bytes = kernel.code_bytes
    resources.max_threads = kernel.max_threads
    sections = elf_sections(cubin)
    for name, size in sections.items():
        bank = re.fullmatch(r"\.nv\.constant(\d+)(?:\.(.*))?", name)
        if bank and (bank[2] is None or bank[2] == entry):
            resources.constant_bytes.setdefault(f"cmem[{bank[1]}]", size)
    if resources.local_bytes is None:
        resources.local_bytes = sections.get(f".nv.local.{entry}", 0)
    resources.constant_bytes = dict(sorted(resources.constant_bytes.items()))
    complete_spills(resources)


def find_ptxas() -> str | None:
    found = shutil.which("ptxas")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ptxas").is_file():
            return str(Path(home) / "bin" / "ptxas")
    return None


def nvjitlink_module():
    """cuda.bindings.nvjitlink when its shared library loads, else None."""
    try:
        from cuda.bindings import nvjitlink
        nvjitlink.version()
        return nvjitlink
    except Exception:  # not installed, or libnvJitLink.so not found
        return None


def nvjitlink_missing(what: str) -> KirError:
    """Why nvjitlink_module() is None: cuda-bindings not installed (the jit extra), or
    its nvJitLink library not found."""
    try:
        from cuda.bindings import nvjitlink  # noqa: F401
    except ImportError as error:
        return missing_extra("cuda-bindings' nvjitlink", "jit", what, error)
    return KirError(f"{what}: the nvJitLink library does not load (pip install nvidia-nvjitlink, or "
                    f"{install_hint('jit')})")


def ptxas(ptx: str, arch: str, options: list[str]) -> tuple[bytes, str, str]:
    """(cubin, info log, tool name)."""
    tool = find_ptxas()
    if tool is None:
        raise KirError("ptxas not found (on PATH, $CUDA_HOME/bin or /usr/local/cuda/bin): install "
                       "the CUDA toolkit, or ask for PTX (kind 'ptx')")
    with tempfile.TemporaryDirectory(prefix="kir-jit-") as work:
        source, out = Path(work) / "kernel.ptx", Path(work) / "kernel.cubin"
        source.write_text(ptx)
        proc = subprocess.run([tool, f"-arch={arch}", "-v", *options, str(source), "-o", str(out)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise KirError(f"ptxas failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        release = re.search(r"release (\d+\.\d+)", version)
        return out.read_bytes(), proc.stdout + proc.stderr, f"ptxas {release[1] if release else ''}".strip()


def nvjitlink(ptx: str, arch: str, options: list[str], module=None) -> tuple[bytes, str, str]:
    """(cubin, info log, tool name) through nvJitLink."""
    link = module or nvjitlink_module()
    if link is None:
        raise nvjitlink_missing("assembling with nvJitLink (else use ptxas)")
    flags = [f"-arch={arch}", "-verbose", *options]
    handle = link.create(len(flags), flags)
    try:
        data = ptx.encode()
        try:
            link.add_data(handle, link.InputType.PTX, data, len(data), "kernel.ptx")
            link.complete(handle)
        except link.nvJitLinkError as error:
            size = link.get_error_log_size(handle)
            log = bytearray(size)
            if size:
                link.get_error_log(handle, log)
            raise KirError(f"nvJitLink failed ({error}): {log.rstrip(bytes(1)).decode(errors='replace').strip()}") from None
        size = link.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        link.get_linked_cubin(handle, cubin)
        size = link.get_info_log_size(handle)
        log = bytearray(size)
        if size:
            link.get_info_log(handle, log)
        major, minor = link.version()
        return bytes(cubin), log.rstrip(bytes(1)).decode(errors="replace"), f"nvJitLink {major}.{minor}"
    finally:
        link.destroy(handle)


__all__ = ["check_arch", "complete_spills", "elf_sections", "emit_ptx", "find_ptxas", "from_cubin", "nvjitlink",
           "nvjitlink_missing", "nvjitlink_module", "NVPTX_TRIPLE", "parse_info_log", "ptxas", "Resources",
           "target_machine"]
