"""kir.jit's code against clang's (issue 23 §4): the kernels of benchmarks/jit_speedup.cu,
their device IR as the Proteus pass embeds it at -O3 (before LLVM's passes: the pass runs at
the pipeline's early simplification), compiled unspecialized by kir.jit -O3 and by clang-22
-O3 --cuda-device-only for sm_90. Oracles: ptxas -v (registers) and the PTX's instructions;
clang-22 -ffp-contract=off/on builds for the contraction modes; nvJitLink's real info log
for the spill numbers."""
from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import build as fixture_build
from kir import jit
from kir.errors import OptionError
from kir.jit import codegen, transform
from kir.jit.client import client_environment

SOURCE = Path(__file__).resolve().parents[2] / "benchmarks" / "jit_speedup.cu"
KERNELS = ["_Z9stencil3dPKdPdiiiidd", "_Z5bgemmPKdS0_Pdiiii", "_Z7flaggedPKdPdiid", "_Z5daxpydPKdPdi",
           "_Z7hydro1dPdPKdS1_dddi", "_Z6ltimesPdPKdS1_iiii", "_Z7trapintPddddddi"]
CUDA = [*fixture_build.CLANG_CUDA, "-O3", "--cuda-device-only"]
FP = re.compile(r"^\s+(?:@%p\d+ )?((?:fma|mul|add|sub|neg)[\w.]*\.f(?:32|64))\s", re.M)


def _run(args) -> str:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed:\n{proc.stderr}")
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict:
    for tool in ("clang-22",):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    if not codegen.find_ptxas():
        pytest.skip("ptxas is not installed")
    d = tmp_path_factory.mktemp("codegen")
    out = {}
    for contract in ("fast", "on", "off"):
        flag = [] if contract == "fast" else [f"-ffp-contract={contract}"]  # CUDA's default: fast
        _run([*CUDA, *flag, "-S", SOURCE, "-o", d / f"clang_{contract}.ptx"])
        _run([*CUDA, *flag, "-Xclang", "-disable-llvm-passes", "-emit-llvm", "-c", SOURCE, "-o", d / f"{contract}.bc"])
        out[contract] = ((d / f"{contract}.bc").read_bytes(), (d / f"clang_{contract}.ptx").read_text())
    out["dir"] = d
    return out


def body(ptx: str, kernel: str) -> str:
    start = ptx.index(f".entry {kernel}(")
    return ptx[start:ptx.index("\n}\n", start)]


def registers(ptx: str, kernel: str, d: Path) -> int:
    path = d / f"{kernel}.ptx"
    path.write_text(ptx)
    log = _run([codegen.find_ptxas(), "-arch=sm_90", "-v", path, "-o", d / f"{kernel}.cubin"])
    r = codegen.Resources()
    codegen.parse_info_log(log, kernel, r)
    return r.registers


def ops(ptx: str, kernel: str) -> collections.Counter:
    """Every instruction of the kernel (its opcode with its type and rounding)."""
    return collections.Counter(re.findall(r"^\s+(?:@!?%p\d+ )?([a-z][\w.]*)", body(ptx, kernel), re.M))


@pytest.mark.slow
@pytest.mark.parametrize("kernel", KERNELS)
def test_unspecialized_code_is_clangs(built, kernel):
    bitcode, clang = built["fast"]
    ours = jit.compile(bitcode, kernel, "sm_90", options={"kind": "ptx"})
    assert ours.fp_contract == "fast"  # clang's CUDA default, read from the IR's `contract` flags
    assert registers(ours.ptx, kernel, built["dir"]) == registers(clang, kernel, built["dir"])
    # Every floating-point instruction as clang's: the same fusions, and `.rn` only where clang
    # has it (with llvmlite's default FPOpFusion::Standard, libdevice's exp in `flagged` kept
    # mul.rn/add.rn where clang's AllowFPOpFusion=Fast leaves them fusable by ptxas).
    assert collections.Counter(FP.findall(body(ours.ptx, kernel))) == collections.Counter(FP.findall(body(clang, kernel)))
    if kernel != "_Z9stencil3dPKdPdiiiidd":  # the stencil: 8 integer instructions fewer than clang's
        assert ops(ours.ptx, kernel) == ops(clang, kernel)


def test_pipeline_tuning_is_clangs():
    pto = jit.pipeline.tuning(3)
    assert pto.slp_vectorization and pto.loop_vectorization and pto.loop_unrolling and pto.loop_interleaving
    pto = jit.pipeline.tuning(1)
    assert not (pto.slp_vectorization or pto.loop_vectorization or pto.loop_unrolling)


@pytest.mark.parametrize("contract", ["fast", "on", "off"])
def test_fp_contract_auto_is_what_the_app_was_built_with(built, contract):
    bitcode, clang = built[contract]
    ours = jit.compile(bitcode, "_Z9stencil3dPKdPdiiiidd", "sm_90", options={"kind": "ptx"})
    assert ours.fp_contract == contract
    assert ours.meta["fp_contract"] == contract and ours.meta["config.fp-contract"] == "auto"
    for kernel in ("_Z9stencil3dPKdPdiiiidd", "_Z7flaggedPKdPdiid"):
        ptx = jit.compile(bitcode, kernel, "sm_90", options={"kind": "ptx"}).ptx
        assert collections.Counter(FP.findall(body(ptx, kernel))) == \
            collections.Counter(FP.findall(body(clang, kernel))), contract


@pytest.mark.parametrize("kernel", ["_Z9stencil3dPKdPdiiiidd", "_Z5bgemmPKdS0_Pdiiii", "_Z7flaggedPKdPdiid",
                                    "_Z7hydro1dPdPKdS1_dddi"])
def test_fp_contract_off_is_an_off_build(built, kernel):
    """The app built with CUDA's default (fast), compiled with fp_contract off: the
    floating-point instructions of a -ffp-contract=off build, none fused, all `.rn`
    (ptxas never fuses those): the same results bit for bit."""
    fast_ir, _ = built["fast"]
    _, clang_off = built["off"]
    ptx = jit.compile(fast_ir, kernel, "sm_90", options={"kind": "ptx", "fp_contract": "off"}).ptx
    ours = collections.Counter(FP.findall(body(ptx, kernel)))
    assert ours == collections.Counter(FP.findall(body(clang_off, kernel)))
    if kernel != "_Z7flaggedPKdPdiid":  # flagged calls libdevice's exp, which asks for its fmas itself
        assert not [op for op in ours if op.startswith("fma") or (".rn" not in op and not op.startswith("neg"))]
    fast = jit.compile(fast_ir, kernel, "sm_90", options={"kind": "ptx", "fp_contract": "fast"}).ptx
    if kernel != "_Z7hydro1dPdPKdS1_dddi":  # hydro: no multiply feeds an add alone
        assert any(op.startswith("fma") for op in FP.findall(body(fast, kernel)))


def test_strip_contraction_splits_fmuladd():
    text = ("define double @f(double %a, double %b, double %c) {\n"
            "  %1 = fmul contract double %a, %b\n"
            "  %2 = call fast double @llvm.fmuladd.f64(double %1, double %b, double %c)\n"
            "  %3 = fadd reassoc contract double %2, 1.000000e+00\n"
            "  ret double %3\n}\n"
            "declare double @llvm.fmuladd.f64(double, double, double)\n")
    out, changed = transform.strip_contraction(text)
    assert changed == 4 and "contract" not in out and "fmuladd.f64(" not in out.split("declare")[0]
    assert "%kir.mul.2 = fmul reassoc nnan ninf nsz arcp afn double %1, %b" in out
    assert "%2 = fadd reassoc nnan ninf nsz arcp afn double %kir.mul.2, %c" in out
    transform.parse_verified(out, "f")
    assert transform.fp_contract_of(text) == "fast" and transform.fp_contract_of(out) == "off"


def test_fp_contract_is_part_of_the_key(tmp_path):
    assert ("fp-contract", b"auto") in jit.Options().config()
    off = jit.Options(fp_contract="off")
    assert ("fp-contract", b"off") in off.config()
    env = client_environment(tmp_path, off)
    assert f"fp-contract={b'off'.hex()}" in env["KIR_JIT_CONFIG"].split(",")
    with pytest.raises(OptionError, match="fp_contract 'strict'"):
        jit.Options(fp_contract="strict")


def test_replay_variant_takes_fp_contract():
    import argparse

    from kir.commands import replay_variant
    parser = argparse.ArgumentParser()
    replay_variant.add_variant_arguments(parser)
    args = parser.parse_args(["--fp-contract", "off"])
    options = replay_variant.VariantOptions.from_args(args)
    assert options.asked and options.options["fp_contract"] == "off"
    jit.Options.coerce(options.options)


# --- the assembler -----------------------------------------------------------------


def test_auto_assembler_is_ptxas_until_nvjitlink_is_warm(built):
    assert jit.pick_assembler("auto", False, True) == "ptxas"
    assert jit.pick_assembler("auto", True, True) == "nvjitlink"
    assert jit.pick_assembler("auto", False, False) == "nvjitlink"
    assert jit.pick_assembler("ptxas", True, True) == "ptxas"
    if codegen.nvjitlink_module() is None:
        pytest.skip("nvJitLink does not load")
    # In a fresh worker: the first cubin from ptxas, nvJitLink warmed meanwhile, later ones
    # from nvJitLink; the same code either way.
    script = ("import sys, time, kir.jit as jit\n"
              "bc = open(sys.argv[1], 'rb').read()\n"
              "first = jit.compile(bc, '_Z5daxpydPKdPdi', 'sm_90')\n"
              "time.sleep(5)\n"
              "later = jit.compile(bc, '_Z5daxpydPKdPdi', 'sm_90')\n"
              "print(first.resources.tool, '|', later.resources.tool, '|', first.code == later.code)\n")
    out = _run([sys.executable, "-c", script, built["dir"] / "fast.bc"]).strip().splitlines()[-1]
    first, later, same = out.split(" | ")
    assert first.startswith("ptxas") and later.startswith("nvJitLink"), out
    assert jit.compile(built["fast"][0], "_Z5daxpydPKdPdi", "sm_90", options={"assembler": "ptxas"}).resources.registers == \
        jit.compile(built["fast"][0], "_Z5daxpydPKdPdi", "sm_90", options={"assembler": "nvjitlink"}).resources.registers


# --- spill numbers (issue 23 §1: "spill stores None / loads None" through nvJitLink) ---


def test_nvjitlink_spills_are_numbers(built):
    if codegen.nvjitlink_module() is None:
        pytest.skip("nvJitLink does not load")
    bitcode, _ = built["fast"]
    for kernel in ("_Z5daxpydPKdPdi", "_Z9stencil3dPKdPdiiiidd"):
        compiled = jit.compile(bitcode, kernel, "sm_90", options={"assembler": "nvjitlink"})
        r = compiled.resources
        assert r.tool.startswith("nvJitLink") and (r.spill_stores, r.spill_loads, r.stack_frame) == (0, 0, 0)
        # nvJitLink's log without the ptxas lines, as nvJitLink 13.0 gives it on a hit in the
        # driver's compute cache (the H200: every `kir jit compile` of a kernel after the first,
        # "spill stores None" in 4 of 5 runs; nvJitLink here caches nothing): its own summary
        # ("used N registers, ..., 0 stack, ...") and the cubin say the frame is empty, hence
        # no spills.
        summary = "\n".join(line for line in r.log.splitlines() if not line.startswith("ptxas"))
        assert f"Function properties for '{kernel}'" in summary and " 0 stack" in summary
        alone = codegen.Resources()
        codegen.parse_info_log(summary, kernel, alone)
        assert alone.stack_frame == 0 and alone.registers == r.registers
        codegen.from_cubin(compiled.code, kernel, alone)
        assert (alone.spill_stores, alone.spill_loads) == (0, 0)
