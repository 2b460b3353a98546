"""`kir import-omp`: LLVM's own OpenMP kernel records (LIBOMPTARGET_RECORD=1).

The oracle is libomptarget itself: apt's libomptarget.so.22.1 records a target region
that clang-22 compiled for sm_90 (tests/fixtures/omp_region.c, linked with kir's minimal
device runtime, tests/fixtures/openmp/kir_ompdevice.c: apt has none), its CUDA plugin driving
tests/fixtures/omp_stub_cuda.c (a libcuda whose device is host memory and which runs
the region's kernel on the host, so the program prints what the host plugin computes);
the import is checked against the files libomptarget wrote, and they are what
the bad-input and fuzz tests damage. The host plugin (x86_64) cannot record: a test
shows why. LLVM 19's variant of the format (argument values in ArgPtrs) is tested on
records WRITTEN BY tests/support/omp_rr_writer.py, which follows libomptarget's writer
line by line (LLVM 19's libomptarget here cannot record: it rejects CUDA 13's cubins,
and its JIT has no NVPTX target)."""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import strategies as st

import build as fixture_build
import openmp_apps
from kir.record import Record, Recording
from omp_rr_writer import Launch, bump, write
from record_fuzz import fuzz_folder

LIBOMPTARGET = Path("/usr/lib/llvm-22/lib/libomptarget.so.22.1")
LIBOMP = Path("/usr/lib/x86_64-linux-gnu/libomp.so.5")  # liboffload-22 depends on it (libomp5-19)
KERNEL_PREFIX = "__omp_offloading_"


def fixture(name: str) -> Path:
    return fixture_build.HERE / name


def _tools(*names: str) -> None:
    for name in names:
        if shutil.which(name) is None:
            pytest.skip(f"{name} is not installed")
    for lib in (LIBOMPTARGET, LIBOMP):
        if not lib.exists():
            pytest.skip(f"{lib} is missing (scripts/install-system-deps.sh --tests installs liboffload-22)")


def _run(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def cuda_app(tmp_path_factory) -> tuple[Path, Path]:
    """(the program, the folder of the stub libcuda.so): omp_region.c for sm_90 against
    apt's libomptarget 22 (tests/support/openmp_apps.py; prebuilt with KIR_OPENMP_APPS)."""
    folder = tmp_path_factory.mktemp("omp_cuda")
    given = os.environ.get("KIR_OPENMP_APPS")
    if given and "axpy_app" in openmp_apps.prebuilt(Path(given)):
        app = openmp_apps.prebuilt(Path(given))["axpy_app"]
    else:
        _tools("clang-22", "ptxas", "nvlink", "cc")
        app = openmp_apps.axpy_app(folder)
    stub = folder / "stub"
    stub.mkdir()
    if shutil.which("cc"):
        built = _run("cc", "-shared", "-fPIC", fixture("omp_stub_cuda.c"), "-o", stub / "libcuda.so", cwd=folder)
        assert built.returncode == 0, built.stderr
    return app, stub


@pytest.fixture(scope="module")
def real_record(cuda_app, tmp_path_factory) -> tuple[Path, str, str]:
    """(the folder, the kernel, the stub's launch trace): the program run with
    LIBOMPTARGET_RECORD=1 and LIBOMPTARGET_RR_SAVE_OUTPUT=1 in an empty folder,
    libomptarget writing its record there."""
    app, stub = cuda_app
    folder = tmp_path_factory.mktemp("omp_record")
    search = os.pathsep.join(filter(None, [str(stub), os.environ.get("LD_LIBRARY_PATH")]))  # libomptarget's too
    env = dict(os.environ, LD_LIBRARY_PATH=search, LIBOMPTARGET_RECORD="1", LIBOMPTARGET_RR_SAVE_OUTPUT="1",
               STUB_TRACE="1", STUB_DEVICE_BYTES=str(256 << 20))
    ran = _run(app, cwd=folder, env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["4", "190"], ran.stdout  # b = 3a + 1, as the host plugin computes it
    (json_file,) = folder.glob("*.json")
    kernel = json_file.stem
    assert kernel.startswith(KERNEL_PREFIX)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        kernel + s for s in (".globals", ".image", ".json", ".memory", ".original.output"))
    (trace,) = [line for line in ran.stderr.splitlines() if line.startswith("stub: cuLaunchKernel")]
    return folder, kernel, trace


def copy_of(real_record, tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    folder, kernel, _ = real_record
    shutil.copytree(folder, tmp_path / "run")
    return tmp_path / "run", {s: tmp_path / "run" / (kernel + s)
                              for s in (".image", ".globals", ".memory", ".json", ".original.output")}


# --- libomptarget's own records --------------------------------------------------------

def test_libomptargets_record_imports_as_its_files_say(real_record, cuda_app, tmp_path, kir_cli):
    from kir.replay.planner import recompute_hashes
    folder, kernel, trace = real_record
    doc = json.loads((folder / f"{kernel}.json").read_text())
    out = tmp_path / "kir"
    result = kir_cli("import-omp", folder, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "1 record written" in result.stdout
    # LLVM 22 records the host addresses of its argument slots (prepareArgs), here seen for real
    assert "consecutive 8-byte slots" in result.stderr
    (record,) = Recording(out).records()
    assert record.kernel.name == kernel
    assert record.kernel.image.kind == "cubin" and record.kernel.image.arch == "sm_90"
    assert record.code("image") == (folder / f"{kernel}.image").read_bytes()
    assert len(record.kernel.params) == doc["NumArgs"]
    assert [int.from_bytes(a, "little") for a in record.launch.args] == doc["ArgPtrs"]
    # NumTeamsClause/ThreadLimitClause are the launch's grid and block: the driver saw the same
    grid, block = (doc["NumTeamsClause"], 1, 1), (doc["ThreadLimitClause"], 1, 1)
    assert (tuple(record.launch.grid), tuple(record.launch.block)) == (grid, block)
    assert f"grid ({grid[0]},1,1) block ({block[0]},1,1)" in trace
    assert record.launch.api == "__tgt_target_kernel"
    (region,) = record.allocations
    memory = (folder / f"{kernel}.memory").read_bytes()
    assert (region.address, region.size) == (doc["BumpAllocVAStart"], doc["DeviceMemorySize"]) == (
        record.va_range.base, record.va_range.size)
    assert record.prologue(region) == memory and len(memory) == 1024  # b and a, 64 doubles each
    output = (folder / f"{kernel}.original.output").read_bytes()
    assert record.epilogue(region) == output != memory
    a, b, b_after = (struct.pack("<64d", *v) for v in (range(64), [0] * 64, (3 * i + 1.0 for i in range(64))))
    assert memory == b + a and output == b_after + a  # the bump region: b then a (map order), before and after
    (g,) = record.globals  # LLVM saves globals before the kernel only: the epilogue is assumed, and flagged
    assert (g.name, record.prologue(g), record.epilogue(g)) == ("g_scale", (3).to_bytes(4, "little"),
                                                               (3).to_bytes(4, "little"))
    assert [(f.flag, "g_scale" in f.detail) for f in record.flags] == [("host-pointer", False),
                                                                        ("epilogue-assumed", True)]
    hashes = recompute_hashes(record)
    assert hashes.static == hashes.recorded_static and hashes.identity == hashes.recorded_identity
    kept = json.loads((out / "omp-import.json").read_text())["records"][Path(record.path).name]
    assert kept["loop_trip_count"] == doc["LoopTripCount"] == 64
    assert kept["args"] == "slot-addresses" and kept["epilogue"] is True
    # the region's identity, hashed from the recorded image as `kir hash` hashes the program's own
    [hashed] = [h for h in json.loads(kir_cli("hash", "--json", cuda_app[0]).stdout)["kernels"] if h["kernel"] == kernel]
    assert kept["region_identity"] == hashed["omp_region"] and len(kept["region_identity"]) == 32
    listed = kir_cli("records", out, "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)["records"]) == 1, listed.stderr
    plan = kir_cli("replay", record.path, "--plan", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["code"]["kind"] == "cubin"


def test_libomptarget_records_on_a_gpu(gpu, cuda_app, tmp_path, kir_cli):
    """The same program on a real GPU (the H200): libomptarget's CUDA plugin on the real
    driver (it dlopens libcuda.so: a folder naming the system's libcuda.so.1 so) writes
    the record, and the import matches its files: the region ran on the GPU (kir's device
    runtime), b = 3a + 1 after it."""
    app, _ = cuda_app
    found = [line.split("=>")[-1].strip() for line in _run("ldconfig", "-p", cwd=tmp_path).stdout.splitlines()
             if "libcuda.so.1 " in line and "x86-64" in line]
    if not found:
        pytest.skip("no libcuda.so.1 in the loader's cache")
    driver = tmp_path / "driver"
    driver.mkdir()
    (driver / "libcuda.so").symlink_to(found[0])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    search = os.pathsep.join(filter(None, [str(driver), os.environ.get("LD_LIBRARY_PATH")]))  # libomptarget's too
    env = dict(os.environ, LD_LIBRARY_PATH=search, LIBOMPTARGET_RECORD="1", LIBOMPTARGET_RR_SAVE_OUTPUT="1",
               LIBOMPTARGET_INFO="16")
    ran = _run(app, cwd=run_dir, env=env)
    assert ran.returncode == 0 and ran.stdout.split() == ["4", "190"], ran.stderr  # the region ran, b = 3a + 1
    if "RR did not initialize" in ran.stderr and "out of memory" in ran.stderr:
        # Seen on the H200 (141 GB): libomptarget 22 reserves the device's whole memory for
        # record/replay (RecordReplayTy::preallocateDeviceMemory, getDeviceMemorySize) and
        # offers no setting to ask for less; the allocation fails, recording is off.
        pytest.skip("libomptarget 22 could not reserve the whole device memory for its record/replay: "
                    + next(line for line in ran.stderr.splitlines() if "RR did not initialize" in line))
    assert "Record Replay Initialized" in ran.stderr, ran.stderr
    result = kir_cli("import-omp", run_dir, "-o", tmp_path / "kir", "--json")
    assert result.returncode == 0, result.stderr
    (record,) = Recording(tmp_path / "kir").records()
    kernel = record.kernel.name
    assert kernel.startswith(KERNEL_PREFIX) and record.kernel.image.kind == "cubin"
    (region,) = record.allocations
    assert record.prologue(region) == (run_dir / f"{kernel}.memory").read_bytes()
    assert record.epilogue(region) == (run_dir / f"{kernel}.original.output").read_bytes()
    assert struct.pack("<64d", *range(64)) in record.prologue(region)
    assert struct.pack("<64d", *(3 * i + 1.0 for i in range(64))) in record.epilogue(region)


def test_the_host_plugin_does_not_record(tmp_path):
    """libomptarget 22's host plugin (x86_64) implements no getDeviceMemorySize, so
    RecordReplayTy::preallocateDeviceMemory fails and record/replay stays off
    (PluginInterface.cpp): the region runs, nothing is written, and the reason is on
    stderr."""
    _tools("clang-22")
    built = _run("clang-22", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu",
                 *(fixture(f) for f in ("omp_region.c", "omp_main.c")), "-o", "app", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    env = dict(os.environ, LIBOMPTARGET_RECORD="1", LIBOMPTARGET_RR_SAVE_OUTPUT="1")
    ran = _run(tmp_path / "app", cwd=run_dir, env=env)
    assert ran.returncode == 0 and ran.stdout.split() == ["4", "190"], (ran.stdout, ran.stderr)
    assert list(run_dir.iterdir()) == []
    assert "RR did not initialize RR-properly" in ran.stderr, ran.stderr
    assert "cannot determine Device Memory Size" in ran.stderr, ran.stderr


# --- LLVM 19's variant, and the host plugin's image: records written by the generator ----

def axpy_launch(kernel: str, image: bytes, llvm: int = 22, output: bool = True) -> Launch:
    """omp_region.c's launch as libomptarget lays it out: b then a in the bump region
    (the order the real record above has), n after the pointers; the kernel leaves
    b = 3a + 1."""
    a, b = struct.pack("<64d", *range(64)), bytes(8 * 64)
    after = struct.pack("<64d", *(3 * i + 1.0 for i in range(64)))
    return Launch(kernel, image, [b, a], [after, a] if output else None,
                  globals=[("g_scale", (3).to_bytes(4, "little")), ("empty", b"")], scalars=[64, 0],
                  num_teams=2, thread_limit=32, trip_count=64, llvm=llvm)


def test_llvm19_records_the_argument_values(real_record, tmp_path, kir_cli):
    """LLVM 19's prepareArgs keeps the values in Ptrs, which saveKernelDescr writes: the
    pointer arguments are the buffers' device addresses, inside the recorded region.
    Without LIBOMPTARGET_RR_SAVE_OUTPUT there is no epilogue, and the import says so.
    (Records WRITTEN BY omp_rr_writer around the real record's image.)"""
    folder, kernel, _ = real_record
    launch = axpy_launch(kernel, (folder / f"{kernel}.image").read_bytes(), llvm=19, output=False)
    write(tmp_path / "run", launch)
    result = kir_cli("import-omp", tmp_path / "run" / f"{kernel}.json", "-o", tmp_path / "kir", "--json")
    assert result.returncode == 0, result.stderr
    assert "slots" not in result.stderr and "original.output" in result.stderr
    (record,) = Recording(tmp_path / "kir").records()
    addresses, memory = bump(launch.buffers)
    assert [int.from_bytes(a, "little") for a in record.launch.args] == [*addresses, 64, 0]
    (region,) = record.allocations
    assert all(region.address <= a < region.address + region.size for a in addresses)
    assert record.prologue(region) == memory == record.epilogue(region)
    assert sorted(f.flag for f in record.flags) == ["epilogue-assumed"] * 2
    assert "LIBOMPTARGET_RR_SAVE_OUTPUT" in record.flags[0].detail
    doc = json.loads(result.stdout)
    assert doc["schema"] == "kir.import-omp/1" and doc["records"][0]["args"] == "values"


def test_the_host_plugins_image_is_kept_out(tmp_path, kir_cli):
    """An image for the host plugin (an x86_64 ELF: here the one clang-22 makes of
    omp_region.c, taken from its offload section) is none kir replays: the record has no
    image, the layout is libomptarget's pointer-sized slots, and the import says so."""
    _tools("clang-22", "clang-offload-packager-22")
    built = _run("clang-22", "-fopenmp", "-fopenmp-targets=x86_64-pc-linux-gnu", "-c",
                 fixture("omp_region.c"), "-o", "region.o", cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    assert _run("objcopy", "--dump-section", ".llvm.offloading=offload.bin", "region.o", cwd=tmp_path).returncode == 0
    unpacked = _run("clang-offload-packager-22", "offload.bin", "--image=file=host.o,triple=x86_64-pc-linux-gnu",
                    cwd=tmp_path)
    assert unpacked.returncode == 0, unpacked.stderr
    image = (tmp_path / "host.o").read_bytes()
    symbols = _run("nm", "-P", "--defined-only", "host.o", cwd=tmp_path).stdout.split("\n")
    (kernel,) = [line.split()[0] for line in symbols if line.startswith(KERNEL_PREFIX) and " W " in line]
    write(tmp_path / "run", axpy_launch(kernel, image))
    result = kir_cli("import-omp", tmp_path / "run", "-o", tmp_path / "kir")
    assert result.returncode == 0, result.stderr
    assert "x86_64 ELF (the host plugin's): kept out of the record" in result.stderr
    (record,) = Recording(tmp_path / "kir").records()
    assert record.kernel.image is None and record.kernel.ir is None
    assert [(p.offset, p.size) for p in record.kernel.params] == [(8 * i, 8) for i in range(4)]


def test_check_writes_nothing(real_record, tmp_path, kir_cli):
    result = kir_cli("import-omp", real_record[0], "-o", tmp_path / "kir", "--check")
    assert result.returncode == 0 and "1 record checked" in result.stdout
    assert not (tmp_path / "kir").exists()


# --- bad input: libomptarget's files, damaged ------------------------------------------

def fails(kir_cli, src: Path, out: Path, *expected: str) -> str:
    result = kir_cli("import-omp", src, "-o", out)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert not (out / "records").exists() or not any((out / "records").iterdir())
    return result.stderr


def test_truncated_globals(real_record, tmp_path, kir_cli):
    src, files = copy_of(real_record, tmp_path)
    data = files[".globals"].read_bytes()
    files[".globals"].write_bytes(data[:-2])
    fails(kir_cli, src, tmp_path / "kir", f"{files['.globals']}: byte 12: truncated: global 'g_scale' is 4 bytes, "
                                           "2 remain")
    files[".globals"].write_bytes(b"g_scale")
    fails(kir_cli, src, tmp_path / "kir", "byte 0: global #0's name has no terminating NUL")
    files[".globals"].write_bytes(data + data)
    fails(kir_cli, src, tmp_path / "kir", "byte 16: global 'g_scale' appears twice")


def test_json_missing_and_wrong_fields(real_record, tmp_path, kir_cli):
    src, files = copy_of(real_record, tmp_path)
    doc = json.loads(files[".json"].read_text())
    for change, expected in ((lambda d: d.pop("ArgPtrs"), "missing field 'ArgPtrs'"),
                             (lambda d: d.update(NumArgs="4"), "NumArgs: expected an integer, found str"),
                             (lambda d: d.update(ArgOffsets=[0]), "ArgOffsets: 1 entries, NumArgs is 4"),
                             (lambda d: d.update(NumTeamsClause=0), "NumTeamsClause: 0 is out of range"),
                             (lambda d: d.update(DeviceMemorySize=1 << 64), "DeviceMemorySize: 18446744073709551616 "
                                                                            "is out of range"),
                             (lambda d: d.update(Name="other"), "'other' does not name this file")):
        broken = dict(doc)
        change(broken)
        files[".json"].write_text(json.dumps(broken))
        fails(kir_cli, src, tmp_path / "kir", str(files[".json"]), expected)
    files[".json"].write_text('{"Name": ')
    fails(kir_cli, src, tmp_path / "kir", str(files[".json"]))


def test_memory_and_output_sizes(real_record, tmp_path, kir_cli):
    src, files = copy_of(real_record, tmp_path)
    memory = files[".memory"].read_bytes()
    files[".original.output"].write_bytes(memory[:-16])
    fails(kir_cli, src, tmp_path / "kir", f"{len(memory) - 16} bytes, the input", "not one region")
    files[".memory"].write_bytes(memory + bytes(16))
    fails(kir_cli, src, tmp_path / "kir", f"{len(memory) + 16} bytes", f"DeviceMemorySize {len(memory)}")
    files[".memory"].unlink()
    fails(kir_cli, src, tmp_path / "kir", f"{files['.memory']}: missing")


def test_a_fifo_is_refused_before_it_is_read(real_record, tmp_path, kir_cli):
    """A file of the record that is a FIFO would block a reader: refused as not regular."""
    src, files = copy_of(real_record, tmp_path)
    files[".memory"].unlink()
    os.mkfifo(files[".memory"])
    fails(kir_cli, src, tmp_path / "kir", f"{files['.memory']}: not a regular file (fifo)")


def test_image_that_is_not_one_or_does_not_fit(real_record, tmp_path, kir_cli):
    src, files = copy_of(real_record, tmp_path)
    image = files[".image"].read_bytes()
    files[".image"].write_bytes(b"MZ\x90\x00")
    fails(kir_cli, src, tmp_path / "kir", f"{files['.image']}: byte 0: not a device image", "4d 5a 90 00")
    files[".image"].write_bytes(image[:18] + b"\x99\x00" + image[20:])
    fails(kir_cli, src, tmp_path / "kir", "byte 18: ELF machine 153")
    files[".image"].write_bytes(image)
    doc = json.loads(files[".json"].read_text())
    doc["NumArgs"], doc["ArgPtrs"], doc["ArgOffsets"] = 2, doc["ArgPtrs"][:2], [0, 0]
    files[".json"].write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", "NumArgs is 2, the kernel in", "takes 4 parameters")


def test_a_folder_without_records(tmp_path, kir_cli):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "package.json").write_text("{}")
    fails(kir_cli, tmp_path / "run", tmp_path / "kir", "no LLVM OpenMP kernel record here")
    fails(kir_cli, tmp_path / "nowhere", tmp_path / "kir", "not a directory or a <kernel>.json")


# --- fuzzing the reader ---------------------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("KIR_FUZZ_OMP_EXAMPLES", "500"))  # ~2 s
MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 1 << 12), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 12), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 12), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 12), st.just(b"")),
    st.tuples(st.just("u64"), st.integers(0, 1 << 12), st.sampled_from([0, 1, 0xFFFFFFFF, (1 << 64) - 1])),
)


def test_damaged_records_raise_only_omp_errors(real_record, tmp_path):
    """One of libomptarget's files (the JSON, .globals, .memory, .original.output,
    .image) mutated at random (fixed seed), then read as `kir import-omp --check` does:
    a conversion or an OmpRecordError naming the folder, never another exception."""
    from kir.errors import OmpRecordError
    from kir.omp_record import convert
    source = real_record[0]
    files = sorted(p.name for p in source.iterdir())
    assert len(files) == 5 and len(convert(source, tmp_path / "out", write=False)) == 1
    outcomes = fuzz_folder(source, files, convert, OmpRecordError, FUZZ_EXAMPLES, MUTATION)
    assert outcomes["refused"] > FUZZ_EXAMPLES // 3 and outcomes["read"] > 0, outcomes


def test_the_record_reads_back_whole(real_record, tmp_path):
    """The written record passes kir.record's own reading (every chunk)."""
    from kir.omp_record import convert
    from record_fuzz import read_everything
    (item,) = convert(real_record[0], tmp_path / "kir")
    read_everything(Path(item.record))
    assert Record.load(item.record).kernel.name == real_record[1]
