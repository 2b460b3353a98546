"""The hook layer when code is unloaded, and when it cannot use what it is given.

Unloading (no GPU needed: registrations happen without a driver): `unload_app`
dlopens `libunload.so` (a CUDA library, shared runtime), launches its kernel and
dlcloses it — which runs its __cudaUnregisterFatBinary — twice, so the second
load registers the same kernel at the same host address again. The app asks the
layer (kir/hooks.h) about each load's kernels before and after the unload.

Failures: a process registers damaged fatbins with the (hooked) CUDA runtime
through ctypes; the layer must count each one (kir_hook_stats.failures) and,
with KIR_HOOK_LOG, print one line with libkir's own error for the same bytes
(as `kir inspect` / the Python API report it: the oracle).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import kir
import kir.hook
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.hashing import kernel_hashes

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"


@pytest.fixture(scope="module")
def unload(built):
    return built["unload_app"], built["libunload.so"]


def events(stdout: str) -> list[dict]:
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


def app_lines(stdout: str, prefix: str) -> list[str]:
    return [l for l in stdout.splitlines() if l.startswith(prefix)]


def sm90_static_hashes(library: Path) -> dict[str, str]:
    hashes, errors = kernel_hashes(kir.open(library))
    assert not errors
    return {h.kernel: h.static.hex for h in hashes if h.target == "sm_90" and h.code_kind == "cubin"}


# --- unloading -------------------------------------------------------------------------------------


def test_unregistration_is_traced_and_reloads_register_anew(unload, kir_cli):
    app, library = unload
    result = kir_cli("trace", "--json", "--", app, library, "2")
    assert result.returncode == 0, result.stderr
    ev = events(result.stdout)
    kinds = [e["event"] for e in ev]
    one_load = ["register-fatbin", "register-kernel", "register-global", "launch", "unregister-fatbin"]
    assert kinds == one_load * 2
    registered = [e for e in ev if e["event"] == "register-fatbin"]
    unregistered = [e for e in ev if e["event"] == "unregister-fatbin"]
    # Each unload names the handle its load registered, with the kernel still live then.
    assert [e["handle"] for e in unregistered] == [e["handle"] for e in registered]
    assert [e["kernels"] for e in unregistered] == [1, 1]
    # Both loads' kernels carry kir's hash of the library's sm_90 cubin (the image the hook
    # picks without a device); the second load's launch finds the second load's kernel.
    static = sm90_static_hashes(library)
    kernels = [e for e in ev if e["event"] == "register-kernel"]
    assert [(k["kernel"], k["static"]) for k in kernels] == [("_Z4bumpPii", static["_Z4bumpPii"])] * 2
    launches = [e for e in ev if e["event"] == "launch"]
    assert [(l["kernel"], l["args"][1]) for l in launches] == [("_Z4bumpPii", "0x1"), ("_Z4bumpPii", "0x2")]
    # What the app read from the layer: views of each load, before and after its unload.
    assert app_lines(result.stdout, "loaded kernel") == ["loaded kernel _Z4bumpPii unloaded=0 code=1 kind=cubin"] * 2
    assert app_lines(result.stdout, "unloaded kernel") == [
        "unloaded kernel _Z4bumpPii unloaded=1 code=0 ptx=0 params=2"] * 2
    assert app_lines(result.stdout, "unloaded global") == [
        "unloaded global unload_counter unloaded=1 size=4 address=0"] * 2
    assert app_lines(result.stdout, "stats") == [
        "stats fatbins=0 kernels=0 globals=0 unregistered=2 failures=0"]


def test_text_trace_names_the_unregistration(unload, kir_cli):
    app, library = unload
    result = kir_cli("trace", "--", app, library, "1")
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stdout.splitlines() if l.startswith("kir-trace")]
    registered = re.search(r"register-fatbin handle=(0x[0-9a-f]+)", "\n".join(lines)).group(1)
    assert f"kir-trace unregister-fatbin handle={registered} kernels=1" in lines


@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind not installed")
def test_nothing_reads_an_unloaded_image(unload):
    """Under valgrind: after each dlclose the app asks for the kernel's PTX, which
    was never decoded — a layer still holding a view of the container would read
    the unmapped image (a crash, or valgrind's invalid read). A tracing client
    makes every launch look its kernel up (the second load's, not a stale one)."""
    app, library = unload
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"kir-valgrind-{os.getpid()}.log"
    proc = subprocess.run(["valgrind", "-q", "--error-exitcode=99", f"--log-file={log}", str(app), str(library), "2"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_TRACE": "json"})
    report = log.read_text() if log.exists() else ""
    log.unlink(missing_ok=True)
    assert proc.returncode == 0, report[-3000:] + proc.stderr[-2000:]
    assert "Invalid read" not in report
    assert app_lines(proc.stdout, "unloaded kernel") == [
        "unloaded kernel _Z4bumpPii unloaded=1 code=0 ptx=0 params=2"] * 2
    assert [e["event"] for e in events(proc.stderr)].count("unregister-fatbin") == 2


CLIENT = source("hook/hook_unload_client.c")


@pytest.mark.parametrize("version", [1, 2])
def test_clients_of_either_struct_version(unload, tmp_path, version):
    app, library = unload
    source = tmp_path / "client.c"
    source.write_text(CLIENT)
    client = tmp_path / f"libclient{version}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", f"-DV2={int(version == 2)}", "-I", INCLUDE, source, "-o", client],
                   check=True)
    report = tmp_path / "report.txt"
    proc = subprocess.run([app, library, "2"], capture_output=True, text=True,
                          env={"LD_PRELOAD": str(HOOK), "KIR_HOOK_CLIENTS": str(client),
                               "CLIENT_REPORT": str(report), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    kernels, unregistered = map(int, report.read_text().split())
    assert kernels == 2  # one per load
    assert unregistered == (2 if version == 2 else 0)  # one kernel each time


# --- failures --------------------------------------------------------------------------------------

REGISTER = r"""
import ctypes, json, struct, sys
import kir.hook
ctypes.CDLL("libcudart.so.13", mode=ctypes.RTLD_GLOBAL)  # the real runtime, after the hook in lookup order
process = ctypes.CDLL(None)                              # the hook's interposers come first
register = process.__cudaRegisterFatBinary
register.restype, register.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
unregister = process.__cudaUnregisterFatBinary
unregister.argtypes = [ctypes.c_void_p]
function = process.__cudaRegisterFunction
function.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int] + [ctypes.c_void_p] * 5
keep = []

def wrapper(data, magic):
    container = ctypes.create_string_buffer(data, len(data))
    w = ctypes.create_string_buffer(struct.pack("<IIQQ", magic, 1, ctypes.addressof(container), 0), 24)
    keep.extend([container, w])
    return ctypes.addressof(w)

handles = []
for path, magic, kernel in json.loads(sys.argv[1]):
    handle = register(wrapper(open(path, "rb").read(), magic))
    if kernel:
        stub = ctypes.create_string_buffer(8)
        keep.append(stub)
        function(handle, ctypes.addressof(stub), kernel.encode(), kernel.encode(), -1, None, None, None, None, None)
    handles.append(handle)
before = kir.hook.stats()
for handle in handles:
    unregister(handle)
codes = {code.name.lower(): n for code, n in kir.hook.failure_codes().items()}
print(json.dumps({"handles": handles, "before": before, "after": kir.hook.stats(), "codes": codes}))
"""

WRAPPER_MAGIC = 0x466243B1


def register_in_hooked_process(cases, log=None) -> tuple[dict, str]:
    env = {**os.environ, "LD_PRELOAD": str(HOOK)}
    env.pop("KIR_HOOK_LOG", None)
    if log is not None:
        env["KIR_HOOK_LOG"] = str(log)
    proc = subprocess.run([sys.executable, "-c", REGISTER, json.dumps([[str(p), m, k] for p, m, k in cases])],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def damaged(tmp_path: Path, source: Path, name: str, edit) -> Path:
    data = bytearray(source.read_bytes())
    edit(data)
    out = tmp_path / name
    out.write_bytes(bytes(data))
    return out


@pytest.fixture(scope="module")
def fatbins(built, tmp_path_factory):
    """kernels.fatbin as nvcc wrote it, and damaged copies, with where each is damaged."""
    tmp = tmp_path_factory.mktemp("fatbins")
    good = built["kernels.fatbin"]
    images = kir.open(good).containers[0].images
    second = images[1].entry.offset  # entry #1's header, from the container start
    # The image the hook decodes without a device: the highest-architecture cubin.
    chosen = max((i for i in images if i.kind == "cubin"), key=lambda i: i.entry.sm)
    assert chosen.compression == "none"
    payload = chosen.entry.offset + chosen.entry.header_size
    return {
        "good": good,
        "container_magic": damaged(tmp, good, "magic.fatbin", lambda d: d.__setitem__(0, d[0] ^ 0xFF)),
        "entry_size": damaged(tmp, good, "entry.fatbin", lambda d: struct.pack_into("<Q", d, second + 8, 1 << 32)),
        "image": damaged(tmp, good, "image.fatbin", lambda d: d.__setitem__(slice(payload, payload + 4), b"XELF")),
        "entry_offset": second,
        "chosen": chosen,
    }


def kir_error(kir_cli, path: Path) -> str:
    """libkir's message for the damaged container, as `kir inspect` reports it."""
    result = kir_cli("inspect", path)
    assert result.returncode == 2 and result.stderr.startswith("kir: error: "), result.stderr
    return result.stderr.strip()


def test_each_unusable_fatbin_is_counted_and_logged(fatbins, tmp_path, kir_cli):
    f = fatbins
    cases = [
        (f["good"], 0x12345678, None),                     # not a __fatBinC_Wrapper_t
        (f["container_magic"], WRAPPER_MAGIC, None),       # the container's magic damaged
        (f["entry_size"], WRAPPER_MAGIC, None),            # an entry header runs past the container
        (f["image"], WRAPPER_MAGIC, "_Z4axpyfPKfPfi"),     # the image the layer decodes is not an ELF
        (f["good"], WRAPPER_MAGIC, "_Z7missingv"),          # a kernel the image does not hold
        (f["good"], WRAPPER_MAGIC, "_Z4axpyfPKfPfi"),      # fine
    ]
    log = tmp_path / "hook.log"
    seen, stderr = register_in_hooked_process(cases, log)
    assert "kir-hook" not in stderr  # KIR_HOOK_LOG=PATH: the lines go there
    lines = log.read_text().splitlines()
    handles = [f"{h:#x}" for h in seen["handles"]]
    assert seen["before"]["failures"] == seen["after"]["failures"] == len(lines) == 5
    assert seen["before"]["fatbins"] == 6 and seen["after"]["fatbins"] == 0
    assert seen["after"]["unregistered"] == 6
    bad_wrapper, magic, entry, image, missing = lines
    assert bad_wrapper.startswith(f"kir-hook: error: fatbin {handles[0]}: registered without its code: wrapper at 0x")
    assert bad_wrapper.endswith(": expected magic 0x466243b1, found 0x12345678")
    found, = struct.unpack_from("<I", f["container_magic"].read_bytes())
    assert magic.startswith(f"kir-hook: error: fatbin {handles[1]}: registered without its code: container at 0x")
    assert magic.endswith(f": expected fatbin container magic 0xba55ed50, found {found:#x}")
    # libkir's own words for the same bytes (`kir inspect` of the damaged file), after the container prefix.
    expected = kir_error(kir_cli, f["entry_size"]).split("container #0 at file offset 0x0: ")[-1]
    assert expected.startswith(f"entry #1 at file offset {f['entry_offset']:#x}: payload size 0x100000000")
    assert entry.startswith(f"kir-hook: error: fatbin {handles[2]}: registered without its code: container at 0x")
    assert entry.endswith(": " + expected)
    chosen = f["chosen"]
    with pytest.raises(kir.KirError) as error:
        kir.open(f["image"]).images[chosen.index].code
    expected = str(error.value).split(f"({chosen.target} cubin): ")[-1]
    assert "not an ELF file" in expected
    assert image == f"kir-hook: error: fatbin {handles[3]}: cubin {chosen.target}: {expected}"
    assert missing == (f"kir-hook: error: kernel _Z7missingv: fatbin {handles[4]}: not in the image the layer "
                       f"decoded ({chosen.target}): its parameter layout is unknown")
    # The failures that are libkir errors, by code (kir.hook.failure_codes): each the code libkir
    # raises for the same bytes; the wrapper's magic is bad_magic; the missing kernel is no libkir error.
    def code_of(read) -> str:
        with pytest.raises(kir.KirError) as error:
            read()
        return error.value.code.name.lower()
    expected = Counter(["bad_magic", code_of(lambda: kir.open(f["container_magic"]).images),
                        code_of(lambda: kir.open(f["entry_size"]).images),
                        code_of(lambda: kir.open(f["image"]).images[chosen.index].code)])
    assert seen["codes"] == dict(expected)


LOAD = r"""
import ctypes, json, sys
import kir.hook
ctypes.CDLL(sys.argv[1])  # its constructor registers its fatbin with the (hooked) runtime
print(json.dumps(kir.hook.stats()))
"""


def test_a_damaged_container_in_a_loaded_library_is_read_only_to_its_segment(built, tmp_path):
    """libkernels_shared_runtime.so with its registered container's size field set
    to 1 GiB: the layer may read only to the end of the loaded segment holding the
    container (from the program headers, read here with pyelftools), and says so."""
    from elftools.elf.elffile import ELFFile
    source = built["libkernels_shared_runtime.so"]
    registered = [c for c in kir.open(source).containers if any(i.kind == "ptx" for i in c.images)]
    assert len(registered) == 1
    offset = registered[0].file_offset
    with open(source, "rb") as f:
        elf = ELFFile(f)
        section = elf.get_section_by_name(".nv_fatbin")
        address = section["sh_addr"] + offset - section["sh_offset"]
        segment = next(s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"
                       and s["p_vaddr"] <= address < s["p_vaddr"] + s["p_memsz"])
        left = segment["p_vaddr"] + segment["p_memsz"] - address - 16  # after the container header
    library = damaged(tmp_path, source, "libdamaged.so", lambda d: struct.pack_into("<Q", d, offset + 8, 1 << 30))
    proc = subprocess.run([sys.executable, "-c", LOAD, str(library)], capture_output=True, text=True,
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_HOOK_LOG": "1"})
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["failures"] == 1
    assert re.fullmatch(r"kir-hook: error: fatbin 0x[0-9a-f]+: registered without its code: container at 0x[0-9a-f]+: "
                        rf"fatbin container size 0x40000000 \(at offset 0x8\) runs past the end of its section "
                        rf"\({left:#x} bytes left\)\n", proc.stderr), proc.stderr


def test_failures_are_counted_without_the_log(fatbins):
    seen, stderr = register_in_hooked_process([(fatbins["container_magic"], WRAPPER_MAGIC, None)])
    assert seen["after"]["failures"] == 1 and "kir-hook" not in stderr


def test_log_on_stderr(fatbins):
    seen, stderr = register_in_hooked_process([(fatbins["good"], 0, None)], log="1")
    handle = f"{seen['handles'][0]:#x}"
    assert len(stderr.splitlines()) == 1
    assert re.fullmatch(f"kir-hook: error: fatbin {handle}: registered without its code: wrapper at 0x[0-9a-f]+: "
                        "expected magic 0x466243b1, found 0x0\n", stderr), stderr


def test_a_client_that_cannot_be_loaded_is_reported(unload, tmp_path):
    app, library = unload
    proc = subprocess.run([app, library, "1"], capture_output=True, text=True,
                          env={"LD_PRELOAD": str(HOOK), "KIR_HOOK_CLIENTS": str(tmp_path / "missing.so"),
                               "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0
    assert proc.stderr.startswith(f"kir-hook: error: client {tmp_path / 'missing.so'}: ")
    assert "failures=1" in proc.stdout


def test_no_failures_for_well_formed_apps(built, kir_cli):
    """The fixtures the other hook tests trace are used whole: nothing to report."""
    os.environ["KIR_HOOK_LOG"] = "1"
    try:
        result = kir_cli("trace", "--json", "--", built["hook_app"], "0")
    finally:
        del os.environ["KIR_HOOK_LOG"]
    assert result.returncode == 3
    assert "kir-hook" not in result.stderr


# --- allocation kinds ------------------------------------------------------------------------------

TRACK = r"""
import kir.hook
for i, kind in enumerate(kir.hook.ALLOCATION_KINDS.values()):
    kir.hook.track_allocation(0x7f0000000000 + i * 0x1000, 64, kind)
"""


def test_allocation_kind_names_agree_with_the_trace():
    """kir.hook's names for KIR_ALLOC_* are the ones the layer's trace prints
    (kir::name(AllocationKind), kir/model.hpp)."""
    read, write = os.pipe()
    proc = subprocess.run([sys.executable, "-c", TRACK], capture_output=True, text=True, pass_fds=(write,),
                          env={**os.environ, "LD_PRELOAD": str(HOOK), "KIR_TRACE": "json",
                               "KIR_TRACE_FD": str(write)})
    os.close(write)
    with os.fdopen(read) as lines:
        traced = [json.loads(l) for l in lines]
    assert proc.returncode == 0, proc.stderr
    assert [e["kind"] for e in traced if e["event"] == "alloc"] == list(kir.hook.ALLOCATION_KINDS.values())
    assert kir.hook.ALLOCATION_KINDS == {1: "device", 2: "managed", 3: "host-pinned"}


def test_records_name_allocation_kinds_as_the_hook_does(built, gpu, tmp_path, kir_cli):
    """On a GPU: rec_streams_async allocates pinned host memory (cudaMallocHost) and
    device memory; its records' allocation kinds are kir.hook's names (the
    recorder names them with kir::name(AllocationKind), as the trace does)."""
    from kir.record import Record
    result = kir_cli("record", "-o", tmp_path, "--", built["rec_streams_async"])
    assert result.returncode == 0, result.stderr[-3000:]
    records = sorted((tmp_path / "records").glob("*.kirrec"))
    assert records
    kinds = {a.kind for path in records for a in Record.load(path).allocations}
    assert kinds == {kir.hook.ALLOCATION_KINDS[1], kir.hook.ALLOCATION_KINDS[3]}  # device, host-pinned


# --- memory after unloads --------------------------------------------------------------------------


def rss_line(stdout: str) -> dict[str, int]:
    line = app_lines(stdout, "rss ")
    assert len(line) == 1, stdout[-2000:]
    return {k: int(v) for k, v in (f.split("=") for f in line[0].split()[1:])}


def test_unloaded_images_are_freed(built):
    """libunload_big.so carries a 256 KiB initialized device table (its cubin and PTX
    each hold it). 2000 cycles of dlopen, asking the layer for both images, dlclose:
    the layer frees what it held of each image at the unload (kir/hooks.h), so the
    resident set grows only by the small views it keeps per load (names, layouts:
    about 1 KB a cycle). Bound: 16 MB over 2000 cycles, against the ~1 GB the layer
    handed out (a layer keeping one image in 60 would exceed it); measured from cycle
    10 on, after the runtime's own first-load allocations, and compared with the app
    without the hook."""
    app, library = built["unload_app"], built["libunload_big.so"]
    cycles = 2000
    bare = subprocess.run([app, library, str(cycles), "rss"], capture_output=True, text=True, timeout=600)
    assert bare.returncode == 0, bare.stderr
    hooked = subprocess.run([app, library, str(cycles), "rss"], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "LD_PRELOAD": str(HOOK)})
    assert hooked.returncode == 0, hooked.stderr
    b, h = rss_line(bare.stdout), rss_line(hooked.stdout)
    assert b["handed"] == 0  # no layer: nothing asked
    # Both images of every load were handed out: the cubin alone holds the 256 KiB table.
    assert h["handed"] >= cycles * 2 * (256 << 10)
    growth_kb = h["end"] - h["warm"]
    assert growth_kb < 16 << 10, f"grew by {growth_kb} kB over {cycles} cycles ({h['handed']} bytes handed out)"
    assert b["end"] - b["warm"] < 16 << 10
    assert app_lines(hooked.stdout, "stats")[0].endswith(f"unregistered={cycles} failures=0")
