"""LLVM OpenMP kernel records (LIBOMPTARGET_RECORD=1) WRITTEN BY THIS GENERATOR, not by
libomptarget, for what libomptarget cannot write here: LLVM 19's variant (argument values
in ArgPtrs: LLVM 19's libomptarget rejects CUDA 13's cubins and its JIT has no NVPTX target)
and records around a host plugin's image (libomptarget's host plugin cannot record: no
getDeviceMemorySize). tests/record/test_import_omp.py takes its main oracle from
libomptarget 22 itself.

Each writer follows llvm/llvm-project's offload/plugins-nextgen/common/src/
PluginInterface.cpp, RecordReplayTy, as libomptarget.so.22.1 is built (docs/omp-records.md),
line by line: `alloc` (the bump allocator), `saveImage`, `dumpGlobals`, `saveKernelDescr`
(llvm::json: compact, keys sorted), `dumpDeviceMemory` (`.memory`, `.original.output`).
Around them the code is real: the image is one clang-22 compiled at test time, and the
arguments are laid out as GenericKernelTy::prepareArgs does."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ALIGNMENT = 16  # RecordReplayTy::alloc
VA_START = 0x7F3A_5C00_0000  # what a CUDA plugin's bump region start looks like (any address works)
ARGS_SLOTS = 0x7FFC_4E21_0A40  # a host stack address: &Args[0] in GenericKernelTy::launch


@dataclass
class Launch:
    name: str
    image: bytes
    buffers: list[bytes]                 #: device allocations, in allocation order (the first: the KLE)
    outputs: list[bytes] | None = None   #: the same after the kernel (None: not saved)
    globals: list[tuple[str, bytes]] = field(default_factory=list)
    scalars: list[int] = field(default_factory=list)  #: arguments after the buffers' pointers
    num_teams: int = 1
    thread_limit: int = 128
    trip_count: int = 0
    device_id: int = 0
    llvm: int = 22                       #: 22: ArgPtrs are the slots' addresses; 19: the values


def bump(buffers: list[bytes]) -> tuple[list[int], bytes]:
    """RecordReplayTy::alloc for each buffer in turn: (their addresses, the region
    [VA_START, VA_START + MemorySize) as dumpDeviceMemory reads it)."""
    addresses, region = [], bytearray()
    for data in buffers:
        addresses.append(VA_START + len(region))
        aligned = (len(data) + ALIGNMENT - 1) & ~(ALIGNMENT - 1)  # AlignedSize
        region += data + bytes(aligned - len(data))  # what lies between is never written: zeros here
    return addresses, bytes(region)


def globals_file(entries: list[tuple[str, bytes]]) -> bytes:
    """RecordReplayTy::dumpGlobals: per global of non-zero size, the name and its NUL,
    a uint32_t size, the bytes."""
    out = bytearray()
    for name, data in entries:
        if not data:
            continue
        out += name.encode() + b"\0" + len(data).to_bytes(4, "little") + data
    return bytes(out)


def descriptor(launch: Launch, addresses: list[int], memory_size: int) -> bytes:
    """RecordReplayTy::saveKernelDescr. The values prepareArgs passes: the buffers'
    pointers then the scalars (the KLE first, among the buffers). LLVM 22 writes
    LaunchParams.Ptrs[I] = &Args[I] (consecutive host slots), LLVM 19 the values."""
    values = addresses + launch.scalars
    ptrs = [ARGS_SLOTS + 8 * i for i in range(len(values))] if launch.llvm >= 20 else values
    doc = {"Name": launch.name, "NumArgs": len(values), "NumTeamsClause": launch.num_teams,
           "ThreadLimitClause": launch.thread_limit, "LoopTripCount": launch.trip_count,
           "DeviceMemorySize": memory_size, "DeviceId": launch.device_id, "BumpAllocVAStart": VA_START,
           "ArgPtrs": ptrs, "ArgOffsets": [0] * len(values)}
    # llvm::json::Value printed compactly: objects' keys sorted (json::OStream, sortedElements)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def write(folder: Path, launch: Launch) -> dict[str, Path]:
    """The files GenericKernelTy::launch (saveImage, saveKernelInput, saveKernelDescr) and
    GenericDeviceTy::launchKernel (saveKernelOutputInfo) write into the working directory."""
    folder.mkdir(parents=True, exist_ok=True)
    addresses, memory = bump(launch.buffers)
    files = {s: folder / (launch.name + s) for s in (".image", ".globals", ".memory", ".json", ".original.output")}
    files[".image"].write_bytes(launch.image)  # saveImage: Image.getMemoryBuffer()
    files[".globals"].write_bytes(globals_file(launch.globals))
    files[".memory"].write_bytes(memory)
    files[".json"].write_bytes(descriptor(launch, addresses, len(memory)))
    if launch.outputs is not None:
        _, after = bump(launch.outputs)
        files[".original.output"].write_bytes(after)
    else:
        del files[".original.output"]
    return files
