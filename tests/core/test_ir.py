"""The IR layer: every LLVM module a binary holds, read with llvmlite, checked
against llvm-dis and against the exact bytes the fixtures embedded."""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

import kir
from kir import ir
from llvm_tools import dis_kernels, llvm_dis
from proteus_layout import fnv1a64  # noqa: E402
from running import require


def work(built, name: str) -> Path:
    """The directory where build.py kept a fixture's intermediate files."""
    return built[name].parent / f".{name}.work"


@pytest.mark.parametrize("name", ["hip_rdc.o", "omp_gfx90a.o", "embed_bitcode.o", "fat_lto.o"])
def test_modules_match_llvm_dis(built, tmp_path, name):
    modules = ir.ir_modules(kir.open(built[name]))
    assert modules
    for m in modules:
        assert m.error == ""
        text = llvm_dis(m.bitcode, tmp_path)
        assert f'target triple = "{m.triple}"' in text
        assert {f.name for f in m.kernels} == dis_kernels(text)
        defined = set(re.findall(r"^define [^@]*@([\w.$]+)\(", text, re.M))
        assert {f.name for f in m.functions if not f.is_declaration} == defined


def test_kernel_signatures(built):
    [m, _] = ir.ir_modules(kir.open(built["hip_rdc.o"]))
    axpy = m.function("_Z4axpyfPKfPfi")
    assert axpy.calling_convention == "amdgpu_kernel"
    assert [(p.type, p.store_size) for p in axpy.params] == \
        [("float", 4), ("ptr addrspace(1)", 8), ("ptr addrspace(1)", 8), ("i32", 4)]
    scale = m.function("_Z5scaleIdEvPT_S0_6Params")
    # struct Params { double; int[3]; } passed by value: 24 bytes through byref.
    assert (scale.params[2].pointee_kind, scale.params[2].pointee_size) == ("byref", 24)
    assert {g.name: g.size for g in m.globals}["table"] == 64 * 4


def test_jit_annotations(built):
    for m in ir.ir_modules(kir.open(built["hip_rdc.o"])):
        specialized = m.function("_Z11specializedifPf")
        assert specialized.jit and specialized.jit_args == [1, 2]
        assert not m.function("_Z4axpyfPKfPfi").jit


def test_proteus_cuda_ir_found_without_a_gpu(built):
    """The `_jit_bitcode_tu_*` global of a cubin: exactly the module the fixture embedded."""
    binary = kir.open(built["proteus_cuda"])
    modules = ir.ir_modules(binary)
    [m] = modules
    assert m.embedded.startswith("_jit_bitcode_tu_")
    assert m.bitcode == (work(built, "proteus_cuda") / "dev.bc").read_bytes()
    assert m.triple == "nvptx64-nvidia-cuda"
    links = ir.kernel_ir(binary, modules)
    assert {name for (_, name) in links} == {"_Z4axpyfPKfPfi"}


def test_proteus_hip_sections(built):
    """`.jit.bitcode.tu.<md5>.<hash>` and the per-kernel section, with their name fields."""
    module = (work(built, "proteus_hip.o") / "dev.bc").read_bytes()
    image = next(i for i in kir.open(built["proteus_hip.o"]).images if i.kind == "code-object")
    embedded = {e.kernel or "tu": e for e in image.code.ir}
    assert set(embedded) == {"tu", "_Z4axpyfPKfPfi"}
    for e in embedded.values():
        assert e.bitcode == module
        assert e.md5 == hashlib.md5(module).hexdigest()
        assert e.hash == str(fnv1a64(module))


def test_proteus_host_ir_found_by_scan(built):
    module = (work(built, "proteus_host.o") / "host.bc").read_bytes()
    assert ir.ir_modules(kir.open(built["proteus_host.o"])) == []
    [m] = ir.ir_modules(kir.open(built["proteus_host.o"], scan=True))
    assert m.bitcode == module and m.function("cube") is not None


def test_unreadable_module_is_reported():
    good = b"BC\xc0\xde" + bytes(range(64))
    m = ir.read_module(good, source="test")
    assert m.error.startswith("llvmlite (LLVM 22") and "cannot read this module" in m.error


def test_inspect_ir_json(built, kir_cli):
    result = kir_cli("inspect", "--ir", "--kernels", "--json", built["proteus_hip.o"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    modules = report["ir_modules"]
    assert [m["embedded"].split(".")[3] for m in modules] == ["tu", "_Z4axpyfPKfPfi"]
    kernels = {k["name"]: k for i in report["images"] for k in i["kernels"]}
    assert kernels["_Z4axpyfPKfPfi"]["ir_module"] == 0
    fn = next(f for f in modules[0]["functions"] if f["name"] == "_Z4axpyfPKfPfi")
    assert fn["kernel"] and [p["store_size"] for p in fn["params"]] == [4, 8, 8, 4]


def test_inspect_table_says_where_kernel_ir_is(built, kir_cli):
    result = kir_cli("inspect", "--kernels", "--ir", built["hip_rdc.o"])
    assert result.returncode == 0
    assert "IR modules: 2" in result.stdout
    assert "[jit [1, 2]]" in result.stdout
    cuda = kir_cli("inspect", "--kernels", "--arch", "sm_90", built["proteus_cuda"]).stdout
    assert "_Z4axpyfPKfPfi  params[4] 0:4 8:8 16:8 24:4  (regs" in cuda and "IR: module #0" in cuda


def test_extract_ir(built, kir_cli, tmp_path):
    result = kir_cli("extract", "--ir", built["hip_rdc.o"], "-o", tmp_path)
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "hip_rdc.ir1.amdgcn.bc" in names and "hip_rdc.ir1.amdgcn.ll" in names
    # The .ll assembles back with LLVM's own assembler.
    require("llvm-as-22")
    subprocess.run(["llvm-as-22", tmp_path / "hip_rdc.ir1.amdgcn.ll", "-o", tmp_path / "x.bc"],
                   check=True)
    assert (tmp_path / "hip_rdc.ir1.amdgcn.bc").read_bytes()[:4] == b"BC\xc0\xde"


def test_proteus_jit_metadata(tmp_path):
    """Kernels the Proteus pass marks with !proteus.jit are JIT-annotated."""
    source = tmp_path / "m.ll"
    source.write_text(
        'target triple = "nvptx64-nvidia-cuda"\n'
        "define ptx_kernel void @k(i32 %n) !proteus.jit !0 { ret void }\n"
        "define ptx_kernel void @plain(i32 %n) { ret void }\n"
        "!0 = !{i32 1}\n")
    require("llvm-as-22")
    subprocess.run(["llvm-as-22", source, "-o", tmp_path / "m.bc"], check=True)
    m = ir.read_module((tmp_path / "m.bc").read_bytes())
    assert m.function("k").jit and not m.function("plain").jit
    assert [f.name for f in m.kernels] == ["k", "plain"]


def test_jit_args_unknown_without_annotations(built, kir_cli):
    """The pass deletes @llvm.global.annotations: a kernel only !proteus.jit marks has
    unknown JIT argument positions (None, JSON null, "unknown" in text), not []."""
    binary = kir.open(built["proteus_hip_rdc.o"])
    functions = {f.name: f for m in ir.ir_modules(binary) for f in m.functions}
    scale = functions["_Z9rdc_scalePfi"]
    assert scale.jit and scale.jit_args is None
    # The same kernel before the pass's marking keeps its annotation: positions known.
    unmarked = ir.read_module((work(built, "proteus_hip_rdc.o") / "a0.bc").read_bytes())
    assert unmarked.function("_Z9rdc_scalePfi").jit_args == [2]
    result = kir_cli("inspect", "--ir", "--kernels", "--json", built["proteus_hip_rdc.o"])
    assert result.returncode == 0, result.stderr
    fns = [f for m in json.loads(result.stdout)["ir_modules"] for f in m["functions"]
           if f["name"] == "_Z9rdc_scalePfi"]
    assert fns and all(f["jit"] and f["jit_args"] is None for f in fns)
    text = kir_cli("inspect", "--ir", built["proteus_hip_rdc.o"]).stdout
    assert "_Z9rdc_scalePfi(" in text and "[jit unknown]" in text
