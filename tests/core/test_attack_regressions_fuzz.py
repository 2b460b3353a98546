"""Regressions from the attack of issue 21 on kir's readers of damaged input, each
named after its bug: bitcode that crashed llvmlite's LLVM (SIGABRT, SIGSEGV,
`LLVM ERROR`) and kir with it in `kir inspect --ir`, `extract --ir`, `jit
compile` and `import-mneme` (§9; kir now does its LLVM work in a worker process,
kir/_irworker.py), names that are not UTF-8 (§9), and a `.nvFatBinSegment` of
type SHT_NULL that segfaulted `kir inspect` (§10). The damaged inputs are made
at test time from real ones (tests/support/damage.py): a module clang-22 built, mutated
with fixed seeds; an nvcc object with 4 bytes changed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import build as fixture_build
import damage
import kir

SEEDS = Path(__file__).parents[1] / "native" / "fuzz" / "seeds"
#: Mutants of the module in the damaged object (about 1 in 12 crashes LLVM 22).
MUTANTS = int(os.environ.get("KIR_FUZZ_BITCODE_MUTANTS", "200"))


def kir_run(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def expect_one_line_exit_2(proc: subprocess.CompletedProcess, *phrases: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.stderr.startswith("kir: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    for phrase in phrases:
        assert phrase in proc.stderr, (phrase, proc.stderr)
    return proc.stderr


# --- 9. damaged bitcode crashed LLVM, and kir with it -------------------------------------

@pytest.fixture(scope="module")
def module(built) -> bytes:
    """affine's device module, by clang-22 -emit-llvm (tests/support/build.py)."""
    if "mneme_affine.bc" not in built:
        pytest.skip("clang-22 is not installed")
    return built["mneme_affine.bc"].read_bytes()


@pytest.fixture(scope="module")
def damaged(module, tmp_path_factory) -> tuple[Path, list[bytes]]:
    """A real object whose .llvmbc holds MUTANTS mutants of the module (seed 21)."""
    mutated = damage.mutants(module, 21, MUTANTS)
    return damage.object_with_section(tmp_path_factory.mktemp("damaged"), ".llvmbc", damage.wrapped(mutated)), mutated


@pytest.fixture(scope="module")
def crasher(module, tmp_path_factory) -> bytes:
    """The first mutant (seed 21) llvmlite's LLVM itself dies reading."""
    return damage.first_crasher(damage.mutants(module, 21, MUTANTS), tmp_path_factory.mktemp("crasher"))


@pytest.mark.slow  # a fuzz loop
def test_damaged_bitcode_does_not_crash_inspect_ir(damaged):
    """Every module is listed, readable or not; those that crash LLVM say how (the
    signal, LLVM's assertion); kir's own process lives: exit 0, nothing on stderr."""
    binary, mutated = damaged
    proc = kir_run("inspect", "--ir", binary)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.count("\n-- module #") == len(mutated)
    crashed = [line for line in proc.stdout.splitlines() if "unreadable:" in line and " crashed (SIG" in line]
    assert crashed, proc.stdout[-3000:]
    assert all(" reading this module" in line for line in crashed), crashed[:3]
    report = json.loads(kir_run("inspect", "--ir", "--json", binary).stdout)
    assert len(report["ir_modules"]) == len(mutated)


@pytest.mark.slow  # a fuzz loop
def test_damaged_bitcode_does_not_crash_extract_ir(damaged, tmp_path):
    """Each module's bitcode is written; its text when LLVM read it, else one
    warning line naming the file and the module."""
    binary, mutated = damaged
    proc = kir_run("extract", "--ir", "-o", tmp_path / "out", binary)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    warnings = proc.stderr.splitlines()
    assert warnings and all(w.startswith(f"kir: warning: {binary}: IR module #") for w in warnings), warnings[:3]
    written = [p.name for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert sum(n.endswith(".bc") and ".ir" in n for n in written) == len(mutated)
    assert sum(n.endswith(".ll") for n in written) == len(mutated) - len(warnings)
    assert any(" crashed (SIG" in w for w in warnings)


@pytest.mark.slow  # a fuzz loop
def test_damaged_bitcode_jit_compile_names_the_file_and_module(damaged):
    binary, _ = damaged
    expect_one_line_exit_2(kir_run("jit", "compile", binary, "--kernel", "affine"),
                           f"no kernel with IR in {binary} matches", "could not be read: IR module #")


@pytest.mark.slow  # a fuzz loop
def test_proteus_ir_that_crashes_llvm_is_an_error_of_jit_compile(crasher, tmp_path):
    """The IR embedded as the Proteus pass embeds it (proteus_layout.py) is the
    crasher: `kir hash` and `kir jit compile` name the file and the module, exit 2."""
    for tool in ("clang-22", "clang++-22"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed")
    (tmp_path / "dev.bc").write_bytes(crasher)
    layout = fixture_build.LAYOUT
    subprocess.run([sys.executable, layout, "cuda-source", tmp_path / "dev.bc", tmp_path / "jit.cuh", "--no-main"],
                   check=True)
    # A mutable array, as tests/jit/test_jit_compile.py's app: clang places a const one where kir does not look.
    (tmp_path / "jit.cuh").write_text((tmp_path / "jit.cuh").read_text().replace("__device__ const ", "__device__ "))
    (tmp_path / "app.cu").write_text(f'#include "{fixture_build.HERE / "mneme_affine.cu"}"\nint main() {{ return 0; }}\n')
    app = tmp_path / "app"
    subprocess.run([*fixture_build.CLANG_CUDA_APP, "-include", tmp_path / "jit.cuh", tmp_path / "app.cu", "-o", app],
                   check=True, capture_output=True)
    hashed = kir_run("hash", app)
    assert hashed.returncode == 0 and "Traceback" not in hashed.stderr, hashed.stderr[-2000:]
    expect_one_line_exit_2(kir_run("jit", "compile", app, "--kernel", "affine", "--ptx"),
                           f"{app}: IR module #0 (", "_jit_bitcode_tu_", " crashed (SIG", "reading this module")


def test_jit_compile_of_ir_llvm_cannot_compile_is_an_error(module):
    """A mutant that reads and verifies but names a symbol NVPTX cannot print ends
    LLVM (`LLVM ERROR`, abort) in the back end: a KirError, the process lives."""
    from kir import jit
    from kir.errors import LLVMCrashError
    from kir.ir import IrModule, read_modules
    candidates = read_modules([IrModule(i, "", -1, bitcode=m) for i, m in enumerate(damage.mutants(module, 2, 300))])
    ended = []
    for m in candidates:
        if not m.error and any(f.name == "_Z6affinePiPKi6Affinexi" and not f.is_declaration for f in m.functions):
            try:
                jit.compile(m.bitcode, "_Z6affinePiPKi6Affinexi", "sm_90", options={"kind": "ptx"})
            except LLVMCrashError as error:
                ended.append(str(error))
            except kir.KirError:
                pass
    assert any("LLVM ERROR" in e for e in ended), ended


@pytest.mark.parametrize("seed", sorted((SEEDS / "bitcode").glob("*.bc")), ids=lambda p: p.stem)
def test_bitcode_fuzzing_findings_do_not_crash_kir(seed, tmp_path):
    """What the bitcode fuzzing found, kept as seeds (tests/native/fuzz/seeds/bitcode: an
    assertion in LLVM's bitcode reader; `LLVM ERROR` in the NVPTX back end on a
    module that reads and verifies): `kir inspect --ir` lists the module, kir.jit
    raises a KirError, and this process lives on."""
    from kir import jit
    binary = damage.object_with_section(tmp_path, ".llvmbc", seed.read_bytes())
    proc = kir_run("inspect", "--ir", binary)
    assert proc.returncode == 0 and proc.stderr == "" and "-- module #0" in proc.stdout, proc.stderr[-2000:]
    with pytest.raises(kir.KirError, match=r"llvmlite \(LLVM [\d.]+\) "):
        jit.compile(seed.read_bytes(), "_Z6affinePiPKi6Affinexi", "sm_90", options={"kind": "ptx"})


def test_names_that_are_not_utf8_are_an_unreadable_module(tmp_path):
    """A function named by bytes that are not UTF-8 (valid LLVM IR): llvmlite cannot
    give the name as text; the module is unreadable, no traceback."""
    if shutil.which("llvm-as-22") is None:
        pytest.skip("llvm-as-22 is not installed")
    (tmp_path / "m.ll").write_text('define void @"\\FF\\FEname"() {\n  ret void\n}\n')
    subprocess.run(["llvm-as-22", tmp_path / "m.ll", "-o", tmp_path / "m.bc"], check=True)
    binary = damage.object_with_section(tmp_path, ".llvmbc", (tmp_path / "m.bc").read_bytes())
    proc = kir_run("inspect", "--ir", binary)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "unreadable: llvmlite" in proc.stdout and "utf-8" in proc.stdout, proc.stdout
    proc = kir_run("extract", "--ir", "-o", tmp_path / "out", binary)
    assert proc.returncode == 0 and proc.stderr.count("\n") == 1 and "utf-8" in proc.stderr, proc.stderr


@pytest.mark.slow  # a fuzz loop
def test_bitcode_fuzz_through_the_worker(module):
    """The fuzz loop of the bitcode reader (issue 21 §18): MUTANTS mutants of a real
    module (seed 18) read in one request to kir's worker — every module answered
    (its functions, or one line saying why not), the crashes among them counted —
    then, in this process, what kir does with a module that read: its text."""
    from kir.ir import IrModule, read_modules
    modules = read_modules([IrModule(i, "", -1, bitcode=m) for i, m in enumerate(damage.mutants(module, 18, MUTANTS))])
    crashed = [m for m in modules if " crashed (SIG" in m.error]
    readable = [m for m in modules if not m.error]
    assert crashed and readable, [m.error for m in modules][:5]
    assert all("\n" not in m.error for m in modules)
    for m in readable:
        text = m.text()
        assert all(f.name in text for f in m.functions), text[:500]


# --- 10. a .nvFatBinSegment of type SHT_NULL segfaulted kir inspect ------------------------

SHT_NULL = 0


def test_sht_null_fatbin_segment_is_no_segfault(built, tmp_path):
    """nvcc's object with its .nvFatBinSegment's type set to SHT_NULL (4 bytes):
    the section has no bytes in the file, so no wrappers; the fatbin is still found
    through its own section, as in the original."""
    original = built["kernels.o"]
    broken = damage.with_section_type(original, tmp_path / "null_segment.o", ".nvFatBinSegment", SHT_NULL)
    for verb in (["inspect"], ["inspect", "--kernels"], ["hash"]):
        proc = kir_run(*verb, broken)
        assert proc.returncode == 0, (verb, proc.returncode, proc.stderr[-2000:])
    assert [(i.kind, i.target, i.size) for i in kir.open(broken).images] == \
        [(i.kind, i.target, i.size) for i in kir.open(original).images]


def test_sht_null_fatbin_segment_seed_is_the_attack_input():
    """The fuzz seed (tests/native/fuzz/seeds, run by tests/native/test_native.py's fuzz targets)
    is an nvcc object with a .nvFatBinSegment of type SHT_NULL, and kir reads it."""
    from elftools.elf.elffile import ELFFile
    seed = SEEDS / "nvcc_sht_null_fatbin_segment.bin"
    with open(seed, "rb") as f:
        assert ELFFile(f).get_section_by_name(".nvFatBinSegment")["sh_type"] == "SHT_NULL"
    proc = kir_run("inspect", seed)
    assert proc.returncode == 0 and "cubin" in proc.stdout, proc.stderr[-2000:]
