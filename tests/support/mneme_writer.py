"""Mneme recordings written byte for byte as Mneme's recorder writes them (Olympus-HPC/Mneme
4442a49, functions cited at each writer below), around the IR of a real CUDA kernel built with
clang-22 at test time (the `kernel_ir` and `recording` fixtures). Shared by the import-mneme,
progress and attack-regression tests."""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import xxhash

KERNEL_SOURCE = (Path(__file__).parents[1] / "fixtures" / "mneme_affine.cu").read_text()
KERNEL = "_Z6affinePiPKi6Affinexi"
VA_BASE = 0x153940000000  # DeviceTraits<CUDA>::getSuggestedAddr (include/mneme/DeviceTraits.hpp)
VA_SIZE = 4 << 30
PAGE = 2 << 20
GLOBAL_ADDR = 0x7F3A00001000
DIFF_CHUNK = 1 << 20  # MnemeSnapshot::DiffChunkSize


def u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


@dataclass
class Meta:  # mneme::Metadata (include/mneme/MnemeAnnotation.hpp), defaults as recorded
    builtin: int = 0
    threshold: float = 0.0
    threshold_kind: int = 0
    norm: int = 0
    tag: bytes = b""

    def serialize(self) -> bytes:  # metadata::serialize (src/MnemeAnnotationInternal.cpp)
        return (bytes([self.builtin]) + struct.pack("<d", self.threshold) + bytes([self.threshold_kind, self.norm])
                + u64(len(self.tag)) + self.tag)


@dataclass
class Blob:
    address: int
    data: bytes
    meta: Meta = field(default_factory=Meta)

    @property
    def reserved(self) -> int:  # PageManager::allocateAddr rounds to its page size
        return (len(self.data) + PAGE - 1) // PAGE * PAGE


def bytes_snapshot(globals_: list[tuple[str, int, bytes]], blobs: list[Blob], args: list[bytes]) -> bytes:
    """MnemeSnapshot::takeMnemeBytesSnapshot (include/mneme/MnemeSnapshot.hpp), each blob
    through operator<<(raw_ostream&, const MnemeMemoryBlob&) (include/mneme/MnemeMemory.hpp)."""
    out = bytearray(u64(len(globals_)))
    for name, address, data in globals_:
        out += u64(len(name)) + name.encode() + u64(len(data)) + u64(address) + data
    out += u64(len(blobs))
    for b in blobs:
        out += u64(b.reserved) + u64(len(b.data)) + u64(b.address) + b.data + b.meta.serialize()
    out += u64(len(args))
    for a in args:
        out += u64(len(a)) + a
    return bytes(out)


def changed_ranges(base: bytes, current: bytes, base_offset: int) -> list[bytes]:
    """MnemeSnapshot::writeChangedRanges: each maximal run of differing bytes."""
    ranges, i = [], 0
    while i < len(base):
        while i < len(base) and base[i] == current[i]:
            i += 1
        if i == len(base):
            break
        start = i
        while i < len(base) and base[i] != current[i]:
            i += 1
        ranges.append(u64(base_offset + start) + u64(i - start) + current[start:i])
    return ranges


def diff_snapshot(globals_: list[tuple[str, int, bytes, bytes]], blobs: list[tuple[Blob, bytes]]) -> bytes:
    """MnemeSnapshot::writeMnemeDiffSnapshot: globals diffed whole, blobs per 1 MiB chunk
    (writeCountAndWriteChangedRanges), so a run across a chunk boundary is two ranges."""
    out = bytearray(b"MNEME_DIFF_V1" + u64(len(globals_)))
    for name, address, base, current in globals_:
        ranges = changed_ranges(base, current, 0)
        out += u64(len(name)) + name.encode() + u64(len(base)) + u64(address) + u64(len(ranges)) + b"".join(ranges)
    out += u64(len(blobs))
    for blob, current in blobs:
        out += u64(blob.reserved) + u64(len(blob.data)) + u64(blob.address) + blob.meta.serialize()
        ranges = []
        for offset in range(0, len(blob.data), DIFF_CHUNK):
            ranges += changed_ranges(blob.data[offset:offset + DIFF_CHUNK], current[offset:offset + DIFF_CHUNK], offset)
        out += u64(len(ranges)) + b"".join(ranges)
    return bytes(out)


def dynamic_hash(grid, block, shared: int) -> int:
    """KernelInstancesCollection::computeHash: llvm::stable_hash_combine (LLVM >= 20:
    xxh3_64 over the values' bytes) of grid, of block, then of both and shared memory."""
    combine = lambda *v: xxhash.xxh3_64_intdigest(b"".join(u64(x) for x in v))  # noqa: E731
    return combine(combine(*grid), combine(*block), shared)


def database(static: int, name: str, demangled: str, instances: dict) -> str:
    """KernelInstancesCollection::toJSON, printed by llvm::json (compact, keys sorted)."""
    doc = {"StaticHash": static, "VAddr": f"0x{VA_BASE:016x}", "VASize": VA_SIZE, "KernelName": name,
           "DemangledName": demangled, "Modules": [f"RecordedIR_{static}.bc"], "BinaryBlobs": [],
           "ArgNames": ["out", "in", "a", "bias", "n"], "Specializations": [False, False, False, True, True],
           "instances": instances}
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def rewritten_by_python(text: str) -> str:
    """The database as Mneme's Python side writes it back (`mneme copy`/`move`:
    RecordedExecution.from_json then to_json, python/mneme/recorded_execution.py):
    to_dict's key order, `json.dump(indent=2)`, files in the same folder as basenames
    (_make_path_relative), and each instance's `Args` the kernel's `Specializations`
    (KernelInstance.to_dict writes self.specializations there)."""
    doc = json.loads(text)
    out = {k: doc[k] for k in ("ArgNames", "BinaryBlobs", "DemangledName", "KernelName", "Modules",
                               "Specializations", "StaticHash", "VASize", "VAddr")}
    out["instances"] = {key: {"Args": doc["Specializations"], "BlockDims": inst["BlockDims"],
                              "GridDims": inst["GridDims"], "Occurrences": inst["Occurrences"],
                              "SharedMem": inst["SharedMem"], "Epilogue": inst["Epilogue"],
                              "Prologue": inst["Prologue"]}
                        for key, inst in doc["instances"].items()}
    return json.dumps(out, indent=2)


def instance_json(grid, block, shared, prologue, epilogue, occurrences: int = 1) -> dict:  # KernelInstance::toJSON
    """`Occurrences`: the launches with this dynamic hash; the snapshots are the first's
    (KernelInstancesCollection::takeSnapshot counts a repeat, NumOccurrences++, and skips it)."""
    dims = lambda d: {"x": d[0], "y": d[1], "z": d[2]}  # noqa: E731
    return {"Prologue": prologue, "Epilogue": epilogue, "BlockDims": dims(block), "GridDims": dims(grid),
            "SharedMem": shared, "Args": [], "Occurrences": occurrences}


@dataclass
class Launch:
    grid: tuple
    block: tuple
    dynamic: int
    args: list[bytes]
    prologue: dict          # region name -> bytes ("in", "out", "launched")
    epilogue: dict
    prologue_file: str
    epilogue_file: str


def ints(values) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def run_affine(n: int, mul: int, add: int, bias: int, seed: int, counter: int):
    """The inputs, and the outputs the kernel computes (the oracle, in Python)."""
    inp = [((i * 2654435761 + seed) % 20001) - 10000 for i in range(n)]
    out_before = [(-1 - i) for i in range(n)]
    wrap = lambda x: (x + 2**31) % 2**32 - 2**31  # noqa: E731  (int arithmetic wraps on the GPU)
    out_after = [wrap(x * mul + add + bias) for x in inp]
    return ints(inp), ints(out_before), ints(out_after), u64(counter), u64(counter + n)


def write_recording(folder: Path, ir: bytes, static: int = 15941914485064662553,
                    sizes: tuple[int, int] = (300_000, 5000), occurrences: tuple[int, int] = (1, 1),
                    out_meta: Meta | None = None) -> list[Launch]:
    """Two instances of `affine` (grid/block differ, `sizes` elements): the first with a
    diff epilogue (Mneme's default), the second with a bytes epilogue
    (--epilogue-format bytes); each launched `occurrences` times. `out_meta`: the
    annotation the app set on the output buffer (mneme::annotate: the blob's metadata,
    serialized with it in both snapshots)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"RecordedIR_{static}.bc").write_bytes(ir)  # StoreModuleBytes
    in_addr, out_addr = VA_BASE, VA_BASE + 2 * PAGE
    launches, instances = [], {}
    for k, (n, block, epilogue_format) in enumerate([(sizes[0], 256, "diff"), (sizes[1], 128, "bytes")]):
        grid = (math.ceil(n / block), 1, 1)
        block = (block, 1, 1)
        inp, out0, out1, c0, c1 = run_affine(n, 3, -7, 11, seed=k, counter=100 * k)
        args = [u64(out_addr), u64(in_addr), ints([3, -7]), struct.pack("<q", 11), ints([n])]
        dyn = dynamic_hash(grid, block, 0)
        pro = f"DeviceState.prologue.{static}.{dyn}.mneme"
        epi = f"DeviceState.epilogue.{static}.{dyn}.mneme"
        blobs = [Blob(in_addr, inp), Blob(out_addr, out0, out_meta or Meta())]
        (folder / pro).write_bytes(bytes_snapshot([("launched", GLOBAL_ADDR, c0)], blobs, args))
        if epilogue_format == "diff":
            data = diff_snapshot([("launched", GLOBAL_ADDR, c0, c1)], [(blobs[0], inp), (blobs[1], out1)])
        else:
            data = bytes_snapshot([("launched", GLOBAL_ADDR, c1)],
                                  [Blob(in_addr, inp), Blob(out_addr, out1, out_meta or Meta())], args)
        (folder / epi).write_bytes(data)
        instances[str(dyn)] = instance_json(grid, block, 0, pro, epi, occurrences[k])
        launches.append(Launch(grid, block, dyn, args, {"in": inp, "out": out0, "launched": c0},
                               {"in": inp, "out": out1, "launched": c1}, pro, epi))
    (folder / f"{static}.json").write_text(database(static, KERNEL, "affine(int*, int const*, Affine, long long, int)",
                                                    instances))
    return launches


@pytest.fixture(scope="module")
def kernel_ir(built) -> bytes:
    """affine's device IR by clang-22 (tests/fixtures/mneme_affine.cu, built by build.py:
    a GPU machine without clang takes it from the fixture cache)."""
    if "mneme_affine.bc" not in built:
        pytest.skip("clang-22 is not installed")
    return Path(built["mneme_affine.bc"]).read_bytes()


@pytest.fixture
def recording(tmp_path, kernel_ir):
    launches = write_recording(tmp_path / "mneme", kernel_ir)
    return tmp_path / "mneme", launches
