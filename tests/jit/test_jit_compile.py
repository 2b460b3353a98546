"""kir.jit.compile and `kir jit compile` on a real program: a CUDA app built with
clang-22 whose device module is embedded the way the Proteus pass does
(proteus_layout.py: `_jit_bitcode_tu_*` in the kernel's translation unit; the
module compiled at -O0, so it carries `noinline` / `optnone` as the pass's
embedded IR does). Oracles: the PTX text of LLVM's back end, cuobjdump's
-res-usage and -sass for the cubin, and an unspecialized compile of the same IR."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import build as fixture_build
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir.errors import KirError, OptionError
from kir.sass import find_cuda_tool
from running import run_kir

SOURCE = source("jit/jit_compile_app.cu")

DAXPY = "_Z5daxpydPKdPdi"
STRIDED = "_Z13daxpy_strideddPKdPdi"
SCALED = "_Z6scaled5ScalePKdPdi"
HELPER = "_Z6helperPdi"
FLAGS = "_Z5flagsbhfPd"
SINES = "_Z5sinesdPd"
PRESSURE = "_Z8pressurePKdPd"
BIASED = "_Z6biasedPd"


def _run(args, cwd=None):
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="session")
def app(tmp_path_factory) -> dict:
    """The app, its device bitcode (as embedded) and the path of both."""
    for tool in ("clang-22", "clang++-22", "llvm-dis-22", "llvm-as-22"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    work = tmp_path_factory.mktemp("jit_app")
    source = work / "jit_daxpy.cu"
    source.write_text(SOURCE)
    layout = fixture_build.LAYOUT
    _run([*fixture_build.CLANG_CUDA, "--cuda-device-only", "-emit-llvm", "-c", source, "-o", work / "dev0.bc"])
    _run([sys.executable, layout, "mark-jit", work / "dev0.bc", work / "dev.bc", "--all"])
    _run([sys.executable, layout, "cuda-source", work / "dev.bc", work / "jit.cu"])
    text = (work / "jit.cu").read_text()
    text = "\n".join(line for line in text.splitlines() if not line.startswith("int main"))
    (work / "jit_ir.cuh").write_text(text.replace("__device__ const ", "__device__ ") + "\n")
    _run([*fixture_build.CLANG_CUDA_APP, "-include", work / "jit_ir.cuh", source, "-o", work / "app"])
    return {"app": work / "app", "bitcode": (work / "dev.bc").read_bytes(), "dir": work}


def compile_ptx(app, *args) -> str:
    out = app["dir"] / f"k{abs(hash(args))}.ptx"
    result = run_kir("jit", "compile", app["app"], "--ptx", "-o", out, *args)
    assert result.returncode == 0, result.stderr
    return out.read_text()


def entry_body(ptx: str, kernel: str) -> str:
    start = ptx.index(f".entry {kernel}(")
    return ptx[start:ptx.index("\n}\n", start)]


def double_bits(value: float) -> str:
    return "0d" + struct.pack(">d", value).hex().upper()


# --- arguments --------------------------------------------------------------


def test_specialized_argument_is_folded_and_never_loaded(app):
    ptx = compile_ptx(app, "--kernel", DAXPY, "--arg", "1:f64:2.5")
    body = entry_body(ptx, DAXPY)
    assert re.search(rf"\bfma\.rn\.f64\s+[^;]*{double_bits(2.5)}", body), body
    assert f"[{DAXPY}_param_0]" not in body  # the parameter is never loaded
    assert f"[{DAXPY}_param_1]" in body and f"[{DAXPY}_param_3]" in body


def test_unspecialized_kernel_loads_the_parameter(app):
    body = entry_body(compile_ptx(app, "--kernel", DAXPY), DAXPY)
    assert f"[{DAXPY}_param_0]" in body
    assert double_bits(2.5) not in body
    assert re.search(r"\bfma\.rn\.f64\s+%rd\d+, %rd\d+, %rd\d+, %rd\d+;", body), body


def test_fp_contract_option(app):
    """--fp-contract off: a*x[i]+y[i] stays a multiply and an add, both `.rn` (ptxas keeps
    them apart); the default, auto, reads the app's -ffp-contract=fast from the IR: an fma."""
    off = entry_body(compile_ptx(app, "--kernel", DAXPY, "--fp-contract", "off"), DAXPY)
    assert "fma." not in off and re.search(r"\bmul\.rn\.f64\b", off) and re.search(r"\badd\.rn\.f64\b", off)
    assert re.search(r"\bfma\.rn\.f64\b", entry_body(compile_ptx(app, "--kernel", DAXPY), DAXPY))
    bad = run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--fp-contract", "strict")
    assert bad.returncode == 2 and "--fp-contract" in bad.stderr


def test_the_entry_keeps_the_kernel_signature(app):
    plain = entry_body(compile_ptx(app, "--kernel", DAXPY), DAXPY)
    special = entry_body(compile_ptx(app, "--kernel", DAXPY, "--arg", "1:f64:2.5"), DAXPY)
    params = lambda body: re.findall(r"\.param [^\n]*", body.split(")")[0])  # noqa: E731
    assert params(plain) == params(special) and len(params(plain)) == 4


def test_several_scalars_of_each_width(app):
    ptx = compile_ptx(app, "--kernel", FLAGS, "--arg", "1:bool:1", "--arg", "2:u8:3", "--arg", "3:f32:0.5")
    body = entry_body(ptx, FLAGS)
    for position in (0, 1, 2):
        assert f"[{FLAGS}_param_{position}]" not in body
    # -1 * 3 * 0.5 folded into one constant store (PTX writes the double's bits as an integer)
    bits = struct.unpack("<q", struct.pack("<d", -1.5))[0]
    assert re.search(rf"st\.global\.b64\s+\[%rd\d+\], ({bits}|{double_bits(-1.5)});", body), body


def test_by_value_object_is_folded(app):
    obj = struct.pack("<di", 3.0, 7) + bytes(4)  # struct Scale { double; int; } with its padding
    body = entry_body(compile_ptx(app, "--kernel", SCALED, "--arg", f"1:bytes:{obj.hex()}"), SCALED)
    assert f"{SCALED}_param_0" not in body.split(")", 1)[1]
    assert double_bits(3.0) in body
    assert "+56]" in body  # x[i + 7]: 7 doubles past x[i]


def test_pointer_argument_becomes_a_constant_address(app):
    body = entry_body(compile_ptx(app, "--kernel", DAXPY, "--arg", "2:ptr:0x7f0000001000"), DAXPY)
    assert f"[{DAXPY}_param_1]" not in body
    assert str(0x7F0000001000) in body


def test_python_api_from_bitcode_and_from_an_llvmlite_module(app):
    import llvmlite.binding as llvm

    import kir.jit
    from_bytes = kir.jit.compile(app["bitcode"], DAXPY, "sm_90", specialize={"args": [(1, "f64", 2.5)]},
                                 options={"kind": "ptx"})
    module = llvm.parse_bitcode(app["bitcode"])
    before = str(module)
    from_module = kir.jit.compile(module, DAXPY, "sm_90",
                                  specialize=kir.jit.Specialization(args=[kir.jit.ArgValue.of(1, "f64", 2.5)]),
                                  options=kir.jit.Options(kind="ptx"))
    assert str(module) == before  # the caller's module is not changed
    assert from_bytes.ptx == from_module.ptx
    assert from_bytes.code == from_bytes.ptx.encode() and from_bytes.kind == "ptx"
    assert from_module.static_hash is None  # no bitcode to hash: the caller passes it


def test_static_hash_is_the_binarys(app):
    """The API's hash of one module's bitcode is the one `kir hash` gives the kernel."""
    import kir.jit
    hashes = [json.loads(line) for line in run_kir("hash", "--jsonl", "--kernel", f"^{DAXPY}$",
                                                    app["app"]).stdout.splitlines()]
    ir_hashes = {h["static"] for h in hashes if h["code"] == "ir"}
    assert len(ir_hashes) == 1
    compiled = kir.jit.compile(app["bitcode"], DAXPY, "sm_90", options={"kind": "ptx"})
    assert compiled.static_hash in ir_hashes
    cli = json.loads(run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--ptx", "--json").stdout)
    assert cli["static_hash"] == compiled.static_hash


# --- dims, bounds, inlining --------------------------------------------------


def test_grid_and_block_dims_become_constants(app):
    plain = entry_body(compile_ptx(app, "--kernel", STRIDED), STRIDED)
    assert "%ntid.x" in plain and "%nctaid.x" in plain
    special = compile_ptx(app, "--kernel", STRIDED, "--grid", "64,1,1", "--block", "128")
    body = entry_body(special, STRIDED)
    assert "%ntid" not in body and "%nctaid" not in body
    assert str(64 * 128) in body  # the stride, folded
    only_block = entry_body(compile_ptx(app, "--kernel", STRIDED, "--block", "128,1,1"), STRIDED)
    assert "%ntid" not in only_block and "%nctaid.x" in only_block


def test_launch_bounds_appear_in_ptx_and_cubin(app, cuobjdump):
    ptx = compile_ptx(app, "--kernel", DAXPY, "--bounds", "128,4")
    head = ptx[ptx.index(f".entry {DAXPY}("):ptx.index("{", ptx.index(f".entry {DAXPY}("))]
    assert re.search(r"\.maxntid 128\b", head) and re.search(r"\.minnctapersm 4\b", head), head
    no_min = compile_ptx(app, "--kernel", DAXPY, "--bounds", "64")
    assert ".maxntid 64" in no_min and ".minnctapersm" not in no_min
    assert ".maxntid" not in compile_ptx(app, "--kernel", DAXPY)
    cubin = app["dir"] / "bounds.cubin"
    assert run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--bounds", "128,4",
                   "--assembler", "ptxas", "-o", cubin).returncode == 0
    import kir
    kernel = next(k for k in kir.parse_cubin(cubin.read_bytes()).kernels if k.name == DAXPY)
    assert kernel.max_threads == [128, 1, 1]


def test_noinline_and_optnone_are_dropped(app):
    """The embedded module was built at -O0: every function is noinline optnone.
    Specialized or not, O3 inlines the device function."""
    attributes = b" ".join(_llvm_parse(app["bitcode"]).get_function(HELPER).attributes)
    assert b"noinline" in attributes and b"optnone" in attributes
    ptx = compile_ptx(app, "--kernel", HELPER)
    assert "call" not in entry_body(ptx, HELPER) and ".func" not in ptx
    assert double_bits(2.0) not in ptx  # 2.0 * v is v + v
    body = entry_body(ptx, HELPER)
    assert re.search(r"add\.rn\.f64|mul\.f64|add\.f64", body), body


def _llvm_parse(bitcode):
    import llvmlite.binding as llvm
    return llvm.parse_bitcode(bitcode)


def test_libdevice_is_linked(app, tmp_path):
    """Built with -nocudalib, sin() stays a call of libdevice's __nv_sin: kir.jit
    links libdevice in; the call is inlined and the argument folded."""
    import llvmlite.binding as llvm

    import kir.jit
    source = tmp_path / "s.cu"
    source.write_text("#include <cmath>\n" + SOURCE[SOURCE.index("__global__ void sines"):
                                                  SOURCE.index("__global__ void flags")])
    _run([*fixture_build.CLANG_CUDA, "-nocudalib", "--cuda-device-only", "-emit-llvm", "-c", source,
          "-o", tmp_path / "s.bc"])
    bitcode = (tmp_path / "s.bc").read_bytes()
    assert "__nv_sin" in [f.name for f in llvm.parse_bitcode(bitcode).functions if f.is_declaration]
    compiled = kir.jit.compile(bitcode, SINES, "sm_90", specialize={"args": [(1, "f64", 0.5)]},
                               options={"assembler": "ptxas"})
    body = entry_body(compiled.ptx, SINES)
    assert "__nv_" not in compiled.ptx  # __nv_sin inlined
    # only libdevice's out-of-line slow path (noinline there) stays a call
    assert set(re.findall(r"call\.uni[^,]*, (\w+),", body)) <= {"__internal_trig_reduction_slowpathd"}
    assert f"[{SINES}_param_0]" not in body and double_bits(0.5) in body


def test_device_globals_are_named(app):
    """A kernel using a __device__ variable gets its own copy (not relinked to the
    program's, docs/jit.md): the result says which."""
    import kir.jit
    biased = kir.jit.compile(app["bitcode"], BIASED, "sm_90", options={"kind": "ptx"})
    assert biased.device_globals == ["bias"] and biased.meta["device_globals"] == "bias"
    assert re.search(r"\.global \.align 8 \.f64 bias = 0d3FD0000000000000;", biased.ptx), biased.ptx
    assert kir.jit.compile(app["bitcode"], DAXPY, "sm_90", options={"kind": "ptx"}).device_globals == []
    result = run_kir("jit", "compile", app["app"], "--kernel", BIASED, "--ptx")
    assert result.returncode == 0 and "device globals: bias (the compiled code holds its own copies" in result.stdout


def test_only_the_kernel_is_an_entry_unless_asked(app):
    ptx = compile_ptx(app, "--kernel", DAXPY)
    assert re.findall(r"\.entry (\w+)\(", ptx) == [DAXPY]
    kept = compile_ptx(app, "--kernel", DAXPY, "--keep-other-kernels")
    assert set(re.findall(r"\.entry (\w+)\(", kept)) >= {DAXPY, STRIDED, SCALED, HELPER, FLAGS, SINES}


def test_opt_level_and_pipeline_change_the_output(app):
    levels = {n: compile_ptx(app, "--kernel", DAXPY, "--arg", "1:f64:2.5", "-O", str(n)) for n in range(4)}
    assert levels[0] != levels[3]
    assert len(levels[0].splitlines()) > len(levels[3].splitlines())
    assert f"[{DAXPY}_param_0]" not in entry_body(levels[0], DAXPY)  # specialized at every level
    assert not re.search(rf"fma\.rn\.f64[^;]*{double_bits(2.5)}", levels[0])  # nothing folded at O0
    same = compile_ptx(app, "--kernel", DAXPY, "--arg", "1:f64:2.5", "--pipeline", "default<O3>")
    assert same == levels[3]
    custom = compile_ptx(app, "--kernel", DAXPY, "--arg", "1:f64:2.5", "--pipeline",
                         "function(sroa,instcombine,simplifycfg)")
    assert f"[{DAXPY}_param_0]" not in entry_body(custom, DAXPY)
    assert re.search(rf"fma\.rn\.f64[^;]*{double_bits(2.5)}", custom)


def test_an_explicit_pipeline_runs_only_its_passes(app):
    """Without an inliner in the pipeline the device function stays a call; the
    default pipelines inline it."""
    for pipeline in ("function(sroa,instcombine)", "sroa,simplifycfg"):
        ptx = compile_ptx(app, "--kernel", HELPER, "--pipeline", pipeline)
        assert re.search(r"call(\.uni)?\s", entry_body(ptx, HELPER)), ptx
        assert ".func" in ptx
    for level in ("default<O2>", "sroa,default<O3>,globaldce"):
        ptx = compile_ptx(app, "--kernel", HELPER, "--pipeline", level)
        assert "call" not in entry_body(ptx, HELPER) and ".func" not in ptx


def test_ptx_version_option(app):
    assert ".version 8.0" in compile_ptx(app, "--kernel", DAXPY, "--ptx-version", "80")


# --- cubin and resources -----------------------------------------------------


def res_usage(cuobjdump: str, cubin: Path) -> dict[str, dict[str, str]]:
    text = subprocess.run([cuobjdump, "-res-usage", str(cubin)], capture_output=True, text=True,
                          check=True).stdout
    usage, current = {}, None
    for line in text.splitlines():
        match = re.match(r"\s*Function (\S+):", line)
        if match:
            current = match[1]
        elif current and "REG:" in line:
            usage[current] = dict(re.findall(r"(\w+(?:\[\d+\])?):(\d+)", line))
            current = None
    return usage


@pytest.mark.parametrize("assembler", ["ptxas", "nvjitlink"])
def test_cubin_is_valid_and_resources_match_cuobjdump(app, cuobjdump, assembler, tmp_path):
    import kir.jit
    from kir.jit.codegen import nvjitlink_module
    if assembler == "nvjitlink" and nvjitlink_module() is None:
        pytest.skip("nvJitLink's library is not installed (pip install nvidia-nvjitlink)")
    compiled = kir.jit.compile(app["bitcode"], DAXPY, "sm_90", specialize={"args": [(1, "f64", 2.5)]},
                               options={"assembler": assembler})
    assert compiled.kind == "cubin" and compiled.code[:4] == b"\x7fELF"
    assert compiled.resources.tool.lower().startswith(assembler.replace("nvjitlink", "nvjitlink"))
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(compiled.code)
    usage = res_usage(cuobjdump, cubin)[DAXPY]
    r = compiled.resources
    assert int(usage["REG"]) == r.registers > 0
    assert int(usage["STACK"]) == r.stack_frame
    assert int(usage["SHARED"]) == r.shared_bytes
    assert int(usage["LOCAL"]) == r.local_bytes
    assert int(usage["CONSTANT[0]"]) == r.constant_bytes["cmem[0]"]
    assert r.spill_stores == 0 and r.spill_loads == 0
    assert r.code_bytes and r.code_bytes % 16 == 0
    assert compiled.compile_seconds > 0 and set(compiled.timings) >= {"specialize", "optimize", "codegen", "assemble"}


def test_cubin_disassembles_with_the_constant_folded(app, cuobjdump, tmp_path):
    """cuobjdump -sass (through nvdisasm) accepts the cubin; the SASS multiplies by
    the constant: DFMA with 2.5 as an immediate or a constant-bank operand, and no
    load of the parameter's constant-bank slot happens only in the unspecialized one."""
    import os

    import kir.jit
    nvdisasm = find_cuda_tool("nvdisasm")
    if nvdisasm is None:
        pytest.skip("nvdisasm not found (pip install nvidia-cuda-nvdisasm)")
    env = {**os.environ, "PATH": f"{Path(nvdisasm).parent}:{os.environ.get('PATH', '')}"}
    sass = {}
    for name, spec in (("plain", None), ("special", {"args": [(1, "f64", 2.5)]})):
        compiled = kir.jit.compile(app["bitcode"], DAXPY, "sm_90", specialize=spec,
                                   options={"assembler": "ptxas"})
        cubin = tmp_path / f"{name}.cubin"
        cubin.write_bytes(compiled.code)
        proc = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"Function : {DAXPY}" in proc.stdout
        sass[name] = proc.stdout
    assert "DFMA" in sass["plain"] and "DFMA" in sass["special"]
    # the parameter lives at c[0x0][0x210] (the first kernel parameter on sm_90)
    assert "c[0x0][0x210]" in sass["plain"] and "c[0x0][0x210]" not in sass["special"]
    assert "2.5" in sass["special"] or "0x40040000" in sass["special"]


def test_register_cap_and_spills(app, cuobjdump, tmp_path):
    """A register cap (an assembler option) lowers the registers and raises the
    spills; cuobjdump agrees on registers and stack, and the SASS has local-memory
    stores (STL) exactly when spill stores are reported, more of them under the cap."""
    import os

    import kir.jit
    runs = {}
    for name, cap in (("free", ()), ("capped", ("--maxrregcount=32",))):
        compiled = kir.jit.compile(app["bitcode"], PRESSURE, "sm_90",
                                   options={"assembler": "ptxas", "assembler_options": cap})
        cubin = tmp_path / f"{name}.cubin"
        cubin.write_bytes(compiled.code)
        usage = res_usage(cuobjdump, cubin)[PRESSURE]
        assert int(usage["REG"]) == compiled.resources.registers
        assert int(usage["STACK"]) == compiled.resources.stack_frame
        runs[name] = (compiled, cubin)
    free, capped = runs["free"][0].resources, runs["capped"][0].resources
    assert capped.registers <= 32 < free.registers
    assert capped.spill_stores > free.spill_stores and capped.spill_loads > free.spill_loads
    assert ("assembler-options", b"--maxrregcount=32") in runs["capped"][0].config
    assert runs["capped"][0].meta["config.assembler-options"] == "--maxrregcount=32"
    nvdisasm = find_cuda_tool("nvdisasm")
    if nvdisasm is None:
        pytest.skip("nvdisasm not found (pip install nvidia-cuda-nvdisasm): SASS not checked")
    env = {**os.environ, "PATH": f"{Path(nvdisasm).parent}:{os.environ.get('PATH', '')}"}
    stores = {}
    for name, (compiled, cubin) in runs.items():
        sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True, env=env,
                              check=True).stdout
        stores[name] = len(re.findall(r"\bSTL(\.\w+)*\s", sass))
        assert (stores[name] > 0) == (compiled.resources.spill_stores > 0)
    assert stores["capped"] > stores["free"]


def test_cache_metadata_and_key_inputs(app):
    import kir.jit
    compiled = kir.jit.compile(app["bitcode"], DAXPY, "sm_90",
                               specialize={"args": {1: ("f64", 2.5)}, "block": (256, 1, 1),
                                           "bounds": (256, 2), "shared_bytes": 128},
                               options={"kind": "ptx", "opt_level": 2})
    meta = compiled.meta
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    assert meta["specialize.args"] == "1:f64:2.5" and meta["specialize.block"] == "256,1,1"
    assert meta["config.opt"] == "2" and meta["kind"] == "ptx" and meta["producer"] == "kir.jit"
    inputs = kir.jit.key_inputs(compiled)
    from kir.hashing import ArgType
    assert inputs["args"] == [(1, ArgType.f64.value, struct.pack("<d", 2.5))]
    assert inputs["block"] == (256, 1, 1) and inputs["grid"] is None
    assert inputs["bounds"] == (256, 2) and inputs["shared_bytes"] == 128
    assert inputs["static_hash"] == compiled.static_hash and inputs["arch"] == "sm_90"
    assert ("opt", b"2") in inputs["config"]
    # the options as asked, not what was derived from the IR (its +ptx88): a JIT
    # client gets the same records from the same options
    assert inputs["config"] == kir.jit.Options(kind="ptx", opt_level=2).config()
    attributes = b" ".join(_llvm_parse(app["bitcode"]).get_function(DAXPY).attributes).decode()
    assert ("ptx", b"") in inputs["config"]
    assert meta["ptx_version"] == re.search(r"\+ptx(\d+)", attributes)[1]


def test_jit_key_separates_values(app):
    import kir.hashing
    if not hasattr(kir.hashing, "jit_key"):
        pytest.skip("kir.hashing.jit_key is not in this build yet (issue 12 §2)")
    import kir.jit
    keys = {kir.jit.jit_key(kir.jit.compile(app["bitcode"], DAXPY, "sm_90",
                                            specialize={"args": [(1, "f64", a)]}, options={"kind": "ptx"}))
            for a in (2.5, 2.5, 3.0)}
    assert len(keys) == 2 and all(re.fullmatch(r"[0-9a-f]{32}", k) for k in keys)


def test_key_is_the_one_a_launch_computes(app):
    """What `kir jit compile` stores under is what a JIT client computes at the
    launch (kir_jit_key, from the argument buffer and the kernel's kir_jit_arg):
    the same value hits, another misses."""
    import kir.hashing as hashing
    if not hasattr(hashing, "jit_key_of_launch"):
        pytest.skip("kir.hashing.jit_key_of_launch is not in this build yet (issue 12 §2)")
    import kir.jit
    options = kir.jit.Options(kind="ptx")
    compiled = kir.jit.compile(app["bitcode"], DAXPY, "sm_90", options=options,
                               specialize={"args": [(1, "f64", 2.5)], "block": (256, 1, 1)})

    def launch(a: float) -> str:
        params = [struct.pack("<d", a), struct.pack("<Q", 0x7F0000001000), struct.pack("<Q", 0x7F0000002000),
                  struct.pack("<i", 1000)]
        return hashing.jit_key_of_launch(
            compiled.static_hash, "sm_90", params, [hashing.JitArg(1, hashing.SCALAR, hashing.ArgType.f64.value)],
            grid=(4, 1, 1), block=(256, 1, 1), specialize_block=True, config=options.config())
    assert launch(2.5) == kir.jit.jit_key(compiled)
    assert launch(3.0) != kir.jit.jit_key(compiled)


def test_cli_fills_the_cache(app, tmp_path):
    pytest.importorskip("kir.cache", reason="kir.cache is not in this build yet (issue 12 §3)")
    import kir.hashing
    if not hasattr(kir.hashing, "jit_key"):
        pytest.skip("kir.hashing.jit_key is not in this build yet (issue 12 §2)")
    from kir.cache import Cache
    result = run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--arg", "1:f64:2.5",
                     "--cache", tmp_path / "cache", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    entry = Cache(str(tmp_path / "cache")).lookup(out["key"])
    assert entry is not None and entry.kind == "cubin" and entry.arch == "sm_90"
    assert entry.code[:4] == b"\x7fELF"
    assert entry.meta["specialize.args"] == "1:f64:2.5"


# --- the CLI's selection and bad input -----------------------------------------


def test_kernel_by_regex_and_demangled_name(app):
    ptx = compile_ptx(app, "--kernel", r"^daxpy\(double")
    assert re.findall(r"\.entry (\w+)\(", ptx) == [DAXPY]


def test_text_output(app, tmp_path):
    result = run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--arg", "1:f64:2.5",
                     "--assembler", "ptxas", "-o", tmp_path / "k.cubin")
    assert result.returncode == 0, result.stderr
    assert DAXPY in result.stdout and "registers" in result.stdout and "1:f64:2.5" in result.stdout
    assert (tmp_path / "k.cubin").read_bytes()[:4] == b"\x7fELF"


BAD = [
    (["--kernel", "nosuchkernel"], r"no kernel with IR in .* matches .*_Z5daxpydPKdPdi"),
    (["--kernel", "daxpy"], r"matches 2 kernels: _Z13daxpy_strideddPKdPdi, _Z5daxpydPKdPdi"),
    (["--kernel", "([", ], r"--kernel '\(\[': not a kir pattern: \[ at offset 1: missing \]"),
    (["--kernel", DAXPY, "--arg", "1:f64"], r"--arg '1:f64': expected POS:TYPE:VALUE"),
    (["--kernel", DAXPY, "--arg", "one:f64:2.5"], r"position 'one' is not an integer"),
    (["--kernel", DAXPY, "--arg", "0:f64:2.5"], r"position 0 is not in 1\.\."),
    (["--kernel", DAXPY, "--arg", "1:f65:2.5"], r"unknown type 'f65'"),
    (["--kernel", DAXPY, "--arg", "1:f64:abc"], r"'abc' is not a floating-point number"),
    (["--kernel", DAXPY, "--arg", "4:i8:300"], r"300 does not fit in i8 \(-128\.\.127\)"),
    (["--kernel", DAXPY, "--arg", "1:bytes:0g"], r"bytes are hex digits"),
    (["--kernel", DAXPY, "--arg", "1:f32:2.5"],
     r"argument 1 of _Z5daxpydPKdPdi is double \(8 bytes\), not f32 \(4 bytes\); give one of f64"),
    (["--kernel", DAXPY, "--arg", "4:i64:7"], r"argument 4 of _Z5daxpydPKdPdi is i32 \(4 bytes\), not i64"),
    (["--kernel", DAXPY, "--arg", "1:bytes:00000000"], r"the bytes value has 4 bytes, it needs 8"),
    (["--kernel", DAXPY, "--arg", "5:i32:1"], r"argument 5: _Z5daxpydPKdPdi has 4 parameters"),
    (["--kernel", DAXPY, "--arg", "1:f64:1", "--arg", "1:f64:2"], r"argument 1 is given twice"),
    (["--kernel", SCALED, "--arg", "1:bytes:0000"], r"the object value has 2 bytes, it needs 16"),
    (["--kernel", SCALED, "--arg", "1:f64:1"], r"give the object's bytes"),
    (["--kernel", DAXPY, "--grid", "0,1,1"], r"--grid '0,1,1': each dimension must be in 1\.\."),
    (["--kernel", DAXPY, "--block", "a"], r"--block 'a': expected X\[,Y\[,Z\]\]"),
    (["--kernel", DAXPY, "--bounds", "2048"], r"max threads per block must be in 1\.\.1024"),
    (["--kernel", DAXPY, "--pipeline", "default<O3>,bogus"], r"unknown pass 'bogus'"),
    (["--kernel", DAXPY, "--pipeline", "function(sroa"], r"unbalanced"),
    (["--kernel", DAXPY, "--arch", "sm90"], r"arch 'sm90': expected sm_NN"),
    (["--kernel", DAXPY, "--arch", "gfx90a:xnack"], r"arch 'gfx90a:xnack': expected an AMDGPU target-id"),
    (["--kernel", DAXPY, "--arch", "gfx90a"], r"gfx90a is an AMDGPU target: PTX, ptx_version and ptxas options"),
    (["--kernel", DAXPY, "--block", "64", "--keep-other-kernels"], r"cannot be with other kernels kept"),
    (["--kernel", DAXPY, "--shared-bytes", "-1"], r"--shared-bytes -1: expected a non-negative integer"),
]


@pytest.mark.parametrize("args,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_a_precise_message(app, args, message):
    result = run_kir("jit", "compile", app["app"], "--ptx", *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr
    assert result.stderr.startswith("kir: error: ")


def test_kernel_without_ir(built):
    result = run_kir("jit", "compile", built["app"], "--kernel", "vector_add|axpy|.")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "has no LLVM IR" in result.stderr or "no kernel with IR" in result.stderr


def test_amdgpu_ir_is_refused(built):
    result = run_kir("jit", "compile", built["proteus_hip.o"], "--kernel", "axpy")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "is for amdgcn-amd-amdhsa: kir.jit compiles NVPTX modules" in result.stderr, result.stderr


def test_another_arch(app, cuobjdump, tmp_path):
    """The IR says sm_90 (target-cpu, +sm_90); compiled for sm_80 it is sm_80 code."""
    ptx = compile_ptx(app, "--kernel", DAXPY, "--arch", "sm_80", "--arg", "1:f64:2.5")
    assert ".target sm_80" in ptx
    from kir.jit import Specialization, transform
    module, _ = transform.specialize(_llvm_parse(app["bitcode"]), DAXPY, Specialization(), "sm_80")
    text = str(module)
    assert '"target-cpu"="sm_80"' in text and "+sm_80" in text
    assert '"target-cpu"="sm_90"' not in text and "+sm_90" not in text  # the new kernel's own too
    cubin = tmp_path / "k.cubin"
    result = run_kir("jit", "compile", app["app"], "--kernel", DAXPY, "--arch", "sm_80",
                     "--assembler", "ptxas", "-o", cubin)
    assert result.returncode == 0, result.stderr
    elf = subprocess.run([cuobjdump, "-elf", str(cubin)], capture_output=True, text=True).stdout
    assert re.search(r"CUDA Virtual SM: sm_80\b", elf), elf[:2000]
    import kir
    assert [(i.kind.value, i.target) for i in kir.open(str(cubin)).images] == [("cubin", "sm_80")]


def test_missing_binary():
    result = run_kir("jit", "compile", "/nonexistent/app", "--kernel", "k")
    assert result.returncode == 2 and "Traceback" not in result.stderr and "/nonexistent/app" in result.stderr


def test_api_errors_are_option_errors(app):
    import kir.jit
    from kir.errors import KirError, OptionError
    with pytest.raises(OptionError, match="the module defines no kernel 'nope'"):
        kir.jit.compile(app["bitcode"], "nope", "sm_90")
    with pytest.raises(OptionError, match="is a device function, not a kernel"):
        kir.jit.compile(app["bitcode"], "_Z5twiced", "sm_90")
    with pytest.raises(OptionError, match="a f64 value is 8 bytes, got 4"):
        kir.jit.ArgValue.of(1, "f64", b"\0\0\0\0")
    with pytest.raises(OptionError, match="opt_level 7"):
        kir.jit.Options(opt_level=7)
    with pytest.raises(OptionError, match="unknown key"):
        kir.jit.compile(app["bitcode"], DAXPY, "sm_90", options={"opt": 3})
    with pytest.raises(KirError, match="cannot read the module"):
        kir.jit.compile(b"BC\xc0\xde garbage", DAXPY, "sm_90")
    with pytest.raises(KirError, match="static hash .* is not known"):
        import llvmlite.binding as llvm
        kir.jit.key_inputs(kir.jit.compile(llvm.parse_bitcode(app["bitcode"]), DAXPY, "sm_90",
                                           options={"kind": "ptx"}))


# --- values, and what LLVM 22 honours ----------------------------------------------


@pytest.mark.parametrize("text", ["1:f64:2.5", "2:i8:-128", "3:u64:18446744073709551615", "4:bool:1",
                                  "5:ptr:0x7f0000001000", "6:f32:0.1", "7:bytes:00ff10", "8:f16:1.5",
                                  "9:i32:0x7fffffff"])
def test_arg_text_round_trips(text):
    from kir.jit import ArgValue
    value = ArgValue.parse(text)
    assert ArgValue.parse(value.text()) == value


def test_arg_values_are_the_key_bytes():
    from kir.errors import OptionError
    from kir.jit import ArgValue
    assert ArgValue.parse("1:f64:2.5").value == struct.pack("<d", 2.5)
    assert ArgValue.parse("1:i16:-2").value == struct.pack("<h", -2)
    assert ArgValue.parse("1:f64:0x1.4p+1").value == struct.pack("<d", 2.5)  # hex float
    assert ArgValue.of(3, "u32", 7).value == struct.pack("<I", 7)
    with pytest.raises(OptionError, match=r"--arg '1:f32:1e300': 1e\+300 does not fit in f32"):
        ArgValue.parse("1:f32:1e300")
    with pytest.raises(OptionError, match="-1 does not fit in u8"):
        ArgValue.parse("1:u8:-1")
    with pytest.raises(OptionError, match="a bool is 0, 1, true or false"):
        ArgValue.parse("1:bool:2")
    with pytest.raises(OptionError, match="i32 needs an integer"):
        ArgValue.of(1, "i32", 2.5)


def test_llvm22_honours_attributes_not_annotations():
    """Why launch bounds are function attributes: LLVM 22's NVPTX back end writes
    .maxntid for "nvvm.maxntid", and nothing for an !nvvm.annotations maxntid."""
    import llvmlite.binding as llvm

    from kir.jit.codegen import emit_ptx, target_machine
    module = llvm.parse_assembly("""
        target triple = "nvptx64-nvidia-cuda"
        define ptx_kernel void @by_attribute(ptr %p) "nvvm.maxntid"="96" { ret void }
        define ptx_kernel void @by_annotation(ptr %p) { ret void }
        !nvvm.annotations = !{!0}
        !0 = !{ptr @by_annotation, !"maxntid", i32 96}
    """)
    ptx = emit_ptx(module, target_machine("sm_90", "", 3))
    first, second = ptx.index(".entry by_attribute"), ptx.index(".entry by_annotation")
    assert ".maxntid 96" in ptx[first:second] and ".maxntid" not in ptx[second:]


# --- the transform's steps (kir.jit.transform), each on the app's IR ---------------------

@pytest.fixture
def module(app):
    """A fresh llvmlite module of the app's device IR (built at -O0, as embedded)."""
    return _llvm_parse(app["bitcode"])


def test_kernel_names_are_the_ptx_kernels(module):
    from kir.jit import transform
    names = transform.kernel_names(str(module))
    assert sorted(names) == sorted([DAXPY, STRIDED, SCALED, HELPER, SINES, PRESSURE, BIASED, FLAGS])
    defined = [f.name for f in module.functions if not f.is_declaration]
    assert names == [n for n in defined if n in names]  # in the module's order
    assert "_Z5twiced" in defined and "_Z5twiced" not in names  # a device function


def test_find_kernel(module):
    from kir.jit import transform
    kernels = transform.kernel_names(str(module))
    assert transform.find_kernel(module, DAXPY, kernels).name == DAXPY
    with pytest.raises(OptionError, match=r"defines no kernel 'nope' \(its kernels: _Z5daxpy"):
        transform.find_kernel(module, "nope", kernels)
    with pytest.raises(OptionError, match="_Z5twiced is a device function, not a kernel"):
        transform.find_kernel(module, "_Z5twiced", kernels)


def test_kernel_params_and_the_by_value_object_size(module):
    from kir.jit import transform
    daxpy = transform.kernel_params(module, module.get_function(DAXPY))
    assert [p.type for p in daxpy] == [str(a.type) for a in module.get_function(DAXPY).arguments]
    assert [p.index for p in daxpy] == [0, 1, 2, 3] and not any(p.byval_type for p in daxpy)
    scaled = transform.kernel_params(module, module.get_function(SCALED))
    s = scaled[0]
    # (LLVM's one context renames the struct %struct.Scale.N in a module parsed again)
    assert (s.type, s.byval_kind) == ("ptr", "byval") and re.fullmatch(r"%struct\.Scale(\.\d+)?", s.byval_type)
    assert s.byval_size == 16  # struct Scale { double factor; int offset; }: 8 + 4, aligned to 8
    assert s.text.startswith("ptr") and f"byval({s.byval_type})" in s.text and "%" not in s.text.split(")")[-1]


def test_check_specialization(module):
    from kir.jit import Specialization, transform
    kernels = transform.kernel_names(str(module))
    params = transform.kernel_params(module, module.get_function(DAXPY))
    transform.check_specialization(DAXPY, params, Specialization(args=["4:i32:1"]), kernels, False)
    with pytest.raises(OptionError, match=f"argument 5: {DAXPY} has 4 parameters"):
        transform.check_specialization(DAXPY, params, Specialization(args=["5:i32:1"]), kernels, False)
    with pytest.raises(OptionError, match="cannot be with other kernels kept"):
        transform.check_specialization(DAXPY, params, Specialization(grid=(1, 1, 1)), kernels, True)
    transform.check_specialization(DAXPY, params, Specialization(grid=(1, 1, 1)), [DAXPY], True)


def test_wrapper_attributes(module):
    from kir.jit import Specialization, transform
    fn = module.get_function(DAXPY)
    own = b" ".join(fn.attributes).decode()
    assert "noinline" in own and "optnone" in own and '"target-cpu"="sm_90"' in own
    tokens = transform.wrapper_attributes(fn, Specialization(bounds=(256, 2)), "sm_80", 80)
    assert not {"noinline", "optnone", "alwaysinline"} & set(tokens)
    assert '"target-cpu"="sm_80"' in tokens and '"nvvm.maxntid"="256"' in tokens and '"nvvm.minctasm"="2"' in tokens
    features = next(t for t in tokens if t.startswith('"target-features"='))
    assert "+sm_80" in features and "+ptx80" in features and "+sm_90" not in features
    assert not any("nvvm." in t for t in transform.wrapper_attributes(fn, Specialization(), "sm_90", None))
    assert '"nvvm.minctasm"' not in " ".join(transform.wrapper_attributes(fn, Specialization(bounds=(64, 0)),
                                                                           "sm_90", None))


def test_make_body(module):
    import llvmlite.binding as llvm

    from kir.jit import transform
    body = transform.make_body(module, module.get_function(DAXPY), [STRIDED])
    assert body == DAXPY + transform.BODY_SUFFIX
    with pytest.raises(NameError):
        module.get_function(DAXPY)
    linkage = {f.name: f.linkage for f in module.functions if not f.is_declaration}
    assert linkage[body] == linkage[HELPER] == linkage["_Z5twiced"] == llvm.Linkage.internal
    assert linkage[STRIDED] == llvm.Linkage.external  # kept
    assert all(f.linkage == llvm.Linkage.external for f in module.functions if f.is_declaration)


def test_retarget_attribute_groups(module):
    from kir.jit import transform
    text = str(module)
    groups = lambda t: [line for line in t.splitlines() if line.startswith("attributes #")]  # noqa: E731
    before = " ".join(groups(text)).split()
    report = transform.TransformReport()
    after = groups(transform.retarget_attribute_groups(text, "sm_80", 81, report))
    assert report.attributes_removed == before.count("noinline") + before.count("optnone") > 0
    assert not {"noinline", "optnone"} & set(" ".join(after).split())
    assert len(after) == len(groups(text))
    cpus = re.findall(r'"target-cpu"="(\w+)"', "\n".join(after))
    assert cpus and set(cpus) == {"sm_80"}
    assert "+sm_90" not in "\n".join(after) and "+ptx81" in "\n".join(after)


def retargeted(module) -> str:
    from kir.jit import transform
    return transform.retarget_attribute_groups(str(module), "sm_90", None, transform.TransformReport())


def test_inline_body_and_demote_kernels(module):
    from kir.jit import transform
    kernels = transform.kernel_names(str(module))
    body = transform.make_body(module, module.get_function(DAXPY), [])
    # after retarget_attribute_groups: alwaysinline and -O0's noinline do not verify together
    text = transform.inline_body(retargeted(module), body)
    define = next(line for line in text.splitlines() if line.startswith("define") and f"@{body}(" in line)
    assert "ptx_kernel" not in define and ") alwaysinline #" in define
    others = [k for k in kernels if k != DAXPY]
    assert transform.kernel_names(text) == others
    demoted = transform.demote_kernels(text, others)
    assert transform.kernel_names(demoted) == []
    out = transform.parse_verified(demoted, DAXPY)  # still a valid module: no kernel left
    assert not out.get_function(STRIDED).is_declaration


def test_build_wrapper_and_add_definitions(module):
    from kir.jit import ArgValue, Specialization, transform
    params = transform.kernel_params(module, module.get_function(DAXPY))
    args = [ArgValue.parse("1:f64:2.5"), ArgValue.parse("2:bytes:000000000000f03f")]
    body = transform.make_body(module, module.get_function(DAXPY), [])
    attributes = transform.wrapper_attributes(module.get_function(body), Specialization(), "sm_90", None)
    wrapper, constants, replaced = transform.build_wrapper(DAXPY, body, params, args, attributes)
    assert replaced == [1, 2] and len(constants) == 1
    assert constants[0].startswith(f"@{DAXPY}.kir.arg2 = private unnamed_addr addrspace(1) constant [8 x i8]")
    assert wrapper.startswith(f"define ptx_kernel void @{DAXPY}(double noundef %arg0, ptr noundef %arg1, ")
    assert f"call void @{body}(double 0x4004000000000000, ptr addrspacecast (ptr addrspace(1) " in wrapper
    assert "i32 noundef %arg3" in wrapper.split("\n")[0] and "i32 %arg3)" in wrapper
    text = transform.inline_body(retargeted(module), body)
    out = transform.parse_verified(transform.add_definitions(text, constants, wrapper), DAXPY)
    assert transform.kernel_names(str(out))[-1] == DAXPY
    assert f"{DAXPY}.kir.arg2" in [g.name for g in out.global_variables]


def test_replace_dims(module):
    from kir.jit import Specialization, transform
    text = str(module)
    reads = lambda t, which: len(re.findall(  # noqa: E731
        rf"= (?:tail )?call [^\n]*@llvm\.nvvm\.read\.ptx\.sreg\.{which}\(\)", t))
    assert reads(text, "ntid.x") > 0 and reads(text, "nctaid.x") > 0
    report = transform.TransformReport()
    out = transform.replace_dims(text, Specialization(block=(256, 2, 1)), report)
    assert report.replaced_dims["ntid.x"] == reads(text, "ntid.x") and reads(out, "ntid.x") == 0
    assert reads(out, "nctaid.x") == reads(text, "nctaid.x")  # the grid was not asked for
    assert "= add i32 256, 0" in out and ("= add i32 2, 0" in out) == (reads(text, "ntid.y") > 0)
    assert transform.replace_dims(text, Specialization(), transform.TransformReport()) == text
    transform.parse_verified(out, DAXPY)


def test_a_broken_edit_is_a_kir_error_naming_the_kernel():
    from kir.jit import transform
    with pytest.raises(KirError, match=f"the specialized module of {DAXPY} does not verify"):
        transform.parse_verified("define void @f() {\n  ret i32 0\n}\n", DAXPY)


def test_a_vector_argument_is_specialized_and_keyed_as_its_elements():
    """A Proteus VECTOR runtime constant (`<4 x float>`, kir_jit_key's KIR_JIT_VECTOR): its
    elements become the vector constant, and the JIT key's ARG record names the element type,
    as kir_jit_key encodes it (ArgValue.key_type)."""
    import kir.jit
    from kir.hashing import jit_key_of_launch
    from kir.model import ArgType, JitArg
    ir = """
        target triple = "nvptx64-nvidia-cuda"
        define ptx_kernel void @vscale(<4 x float> %v, ptr addrspace(1) %out) {
          %e = extractelement <4 x float> %v, i32 2
          store float %e, ptr addrspace(1) %out
          ret void
        }
    """
    elements = struct.pack("<4f", 1.0, 2.0, 0.375, 4.0)
    arg = kir.jit.ArgValue(1, "bytes", elements, key_type="f32")
    compiled = kir.jit.compile(ir, "vscale", "sm_90", specialize={"args": [arg]}, options={"kind": "ptx"},
                               static_hash="00" * 16)
    bits = struct.unpack("<I", struct.pack("<f", 0.375))[0]
    assert f"], {bits};" in compiled.ptx or "0f3EC00000" in compiled.ptx  # element 2, 0.375, a constant
    assert kir.jit.key_inputs(compiled)["args"] == [(1, int(ArgType.f32), elements)]
    client = jit_key_of_launch("00" * 16, "sm_90", [elements, b"\0" * 8],
                               [JitArg(1, "vector", int(ArgType.f32), True, 4)], param_sizes=[16, 8],
                               config=compiled.config)
    assert kir.jit.jit_key(compiled) == client
    with pytest.raises(OptionError, match="the bytes value has 8 bytes, it needs 16"):
        kir.jit.compile(ir, "vscale", "sm_90", specialize={"args": [kir.jit.ArgValue(1, "bytes", elements[:8])]},
                        options={"kind": "ptx"})


def test_every_offered_pass_runs_on_a_real_module(app):
    """kir.jit.pipeline.PASSES: every llvmlite add_* method is offered or said why not
    (NOT_OFFERED), and each offered pass runs alone on the app's device IR, the module
    still valid and its kernel still defined (issue 24 §3: --passes)."""
    import llvmlite.binding as llvm

    from kir.jit import pipeline
    from kir.jit.codegen import target_machine
    methods = {n for n in dir(llvm.ModulePassManager) if n.startswith("add_")}
    assert methods == set(pipeline.PASSES.values()) | set(pipeline.NOT_OFFERED)
    from kir.jit import Specialization, transform
    machine = target_machine("sm_90", "", 3)
    for name in sorted(pipeline.PASSES):
        # as kir.jit.compile runs a pipeline: after the transform (which drops -O0's optnone)
        module, _ = transform.specialize(_llvm_parse(app["bitcode"]), DAXPY, Specialization(), "sm_90")
        before = str(module)
        pipeline.run(module, machine, pipeline.parse(f"module({name})"))
        module.verify()
        kernel = module.get_function(DAXPY)
        assert not kernel.is_declaration, name
        if name in ("instcombine", "sroa", "instnamer"):
            assert str(module) != before, name  # these change an unoptimized module
