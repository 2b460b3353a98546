"""kir's hard-coded HIP ABI against the HIP headers installed with the real runtime (Debian's
libamdhip64-dev, ROCm 5.2, in CI; a ROCm install's elsewhere): docs/hip.md's table, checked.

kir declares no HIP header (the hook builds without ROCm), so every prototype it calls or
interposes and every enum value it uses is written into its sources. This test reads them
from there — the hook's KIR_REAL / DriverEntry / KIR_HIP lookups, the constants — and
compiles a program against <hip/hip_runtime_api.h> that static_asserts each of kir's
prototypes is call-compatible with ROCm's (same arity; each parameter and the result of the
same size and class: pointer, integer or enum, floating, or struct of the same layout) and
prints the enum values kir hard-codes. It fails when either side drifts."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

import build
import kir
from running import ROOT, real_hip_library, require

HOOK = ROOT / "libkir" / "hook"


def hip_include_dir() -> Path:
    include = real_hip_library().parent.parent / "include"
    if include.name == "include" and not (include / "hip" / "hip_runtime_api.h").exists():
        include = Path("/usr/include")
    if not (include / "hip" / "hip_runtime_api.h").exists():
        pytest.skip(f"no hip/hip_runtime_api.h next to {real_hip_library()}: install libamdhip64-dev")
    return include


def kir_prototypes() -> tuple[dict[str, str], list[str]]:
    """name -> the function type kir's hook uses for it (kir's spelling: int for hipError_t,
    void* for handles, Dim3 for dim3), from the hook's HIP sources; and the type aliases
    (`using X = ...;`) those spellings use."""
    found: dict[str, str] = {}
    runtime = (HOOK / "hip_runtime.cpp").read_text()
    aliases = [f"using {a} = {' '.join(t.split())};" for a, t in re.findall(r"^\s*using (\w+) = ([^;]+);", runtime, re.M)]
    for name, kind in re.findall(r"KIR_REAL\(((?:__)?hip\w+),\s*(.+?)\);", runtime, re.S):
        found[name] = " ".join(kind.split())
    vendor = (HOOK / "vendor_hip.cpp").read_text()
    entries = dict(re.findall(r"(\w+)\(\"(hip\w+)\", kLibraries\)", vendor))
    for var, kind in re.findall(r"(\w+)\.get<(.+?)>\(\)", vendor):
        if var in entries:
            found[entries[var]] = " ".join(kind.split())
    override = (HOOK / "override.cpp").read_text()
    local = {a: " ".join(t.split()) for a, t in re.findall(r"using (\w+) = (.+?);", override, re.S)}
    for _, kind, name in re.findall(r"KIR_HIP\((\w+), (\w+), \"(hip\w+)\"\)", override):
        found[name] = local.get(kind, kind)
    return found, aliases


def kir_constant(path: Path, name: str) -> int:
    match = re.search(rf"\b{name}\s*=\s*(0x[0-9A-Fa-f]+|\d+)", path.read_text())
    assert match, f"{name} is no longer defined in {path}: update this test and docs/hip.md"
    return int(match.group(1), 0)


def header_prototypes(include: Path) -> dict[str, str]:
    """name -> function type of every function hip/hip_runtime_api.h declares, as clang-22
    reads the header in C (its C++ template overloads of hipMalloc & co. left out)."""
    if shutil.which(build.CLANG) is None:
        pytest.skip(f"{build.CLANG} not installed")
    proc = subprocess.run([build.CLANG, "-x", "c", "-fsyntax-only", "-D__HIP_PLATFORM_AMD__", "-I", str(include),
                           "-Xclang", "-ast-dump=json", "-"], input="#include <hip/hip_runtime_api.h>\n",
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {d["name"]: d["type"]["qualType"] for d in json.loads(proc.stdout)["inner"]
            if d.get("kind") == "FunctionDecl" and "name" in d}


CHECK = r"""
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <hip/hip_runtime_api.h>

namespace kirabi {
struct Dim3 { unsigned x, y, z; };  // kir::hook::Dim3 (libkir/hook/interpose.hpp)
// hip_runtime.cpp's own aliases (hipError_t = int, hipStream_t = void*, ...).
@ALIASES@

template <class A, class B> constexpr bool same_class() {
  if constexpr (std::is_void_v<A> || std::is_void_v<B>) return std::is_void_v<A> && std::is_void_v<B>;
  else if constexpr (std::is_pointer_v<A> || std::is_pointer_v<B>) {
    if constexpr (!std::is_pointer_v<A> || !std::is_pointer_v<B>) return false;
    else {
      using PA = std::remove_cv_t<std::remove_pointer_t<A>>;
      using PB = std::remove_cv_t<std::remove_pointer_t<B>>;
      if constexpr (std::is_void_v<PA> || std::is_void_v<PB> || std::is_function_v<PA> || std::is_function_v<PB> ||
                    !std::is_scalar_v<PA> || !std::is_scalar_v<PB>)
        return true;  // opaque: only the pointer crosses
      else return sizeof(PA) == sizeof(PB);  // an out-parameter: the callee writes sizeof(PB) bytes
    }
  } else if constexpr (std::is_class_v<A> || std::is_class_v<B>)
    return std::is_class_v<A> && std::is_class_v<B> && sizeof(A) == sizeof(B) && alignof(A) == alignof(B);
  else return sizeof(A) == sizeof(B) && std::is_floating_point_v<A> == std::is_floating_point_v<B>;
}
template <class F, class G> struct Same;
template <class R1, class... A1, class R2, class... A2> struct Same<R1 (*)(A1...), R2 (*)(A2...)> {
  static_assert(sizeof...(A1) == sizeof...(A2), "arity");
  static constexpr bool value = same_class<R1, R2>() && (same_class<A1, A2>() && ...);
};
}  // namespace kirabi

// ROCm's prototypes, as clang reads them from the header in C (where no C++ overload hides them).
@HEADER@
namespace kirabi {
// kir's types, spelled as in its sources (hipError_t, hipStream_t and Dim3 are kirabi's here).
@ASSERTS@
}  // namespace kirabi

// ROCm's own dim3 has kir's layout: three unsigned, x first.
static_assert(sizeof(dim3) == sizeof(kirabi::Dim3) && offsetof(dim3, x) == 0 && offsetof(dim3, y) == 4 &&
              offsetof(dim3, z) == 8);
static_assert(sizeof(hipError_t) == sizeof(int));

int main() {
@PRINTS@
  return 0;
}
"""

# The enum values kir (or the fixtures it is tested with) hard-codes, by their ROCm names.
ENUMS = ["hipSuccess", "hipErrorNoDevice", "hipErrorInvalidDevice", "hipErrorNotFound",
         "hipFuncAttributeMaxDynamicSharedMemorySize", "hipMemcpyHostToHost", "hipMemcpyHostToDevice",
         "hipMemcpyDeviceToHost"]


@pytest.fixture(scope="module")
def header_values(tmp_path_factory) -> dict[str, int]:
    include = hip_include_dir()
    if shutil.which("g++") is None:
        pytest.skip("g++ not installed")
    prototypes, aliases = kir_prototypes()
    # What the hook used when this test was written: a parser that stops finding them fails here.
    assert {"__hipRegisterFatBinary", "__hipRegisterFunction", "__hipRegisterVar", "hipLaunchKernel", "hipMalloc",
            "hipModuleLoadData", "hipModuleGetFunction", "hipModuleLaunchKernel",
            "hipFuncSetAttribute"} <= set(prototypes), sorted(prototypes)
    declared = header_prototypes(include)
    checked = sorted(n for n in prototypes if n in declared)
    # Not declared by these headers: the registration entry points clang's constructor calls
    # (docs/hip.md cites clang and ROCm/clr for them) and APIs newer than the installed release.
    assert {"hipMalloc", "hipLaunchKernel", "hipModuleLaunchKernel"} <= set(checked)
    # ROCm 5.2 declares these of the hook's later entry points (docs/hip.md): checked wherever 5.2's
    # or a newer header is installed (hipMemAllocHost, hipExtHostAlloc, hipGetProcAddress and 7.x's
    # hipLibrary* are not in 5.2's headers).
    if "hipLaunchKernel_spt" in declared:
        assert {"hipHostAlloc", "hipMallocHost", "hipFreeHost", "hipLaunchKernel_spt",
                "hipLaunchCooperativeKernel_spt"} <= set(checked)
    header = "\n".join(f"using rocm_{n} = std::add_pointer_t<{declared[n]}>;" for n in checked)
    asserts = "\n".join(f'static_assert(Same<::rocm_{n}, {prototypes[n]}>::value, "kir\'s {n} is not ROCm\'s");'
                         for n in checked)
    prints = "\n".join(f'  std::printf("{e} %lld\\n", (long long){e});' for e in ENUMS)
    d = tmp_path_factory.mktemp("hip_abi")
    source = d / "check.cpp"
    source.write_text(CHECK.replace("@ALIASES@", "\n".join(aliases)).replace("@HEADER@", header)
                      .replace("@ASSERTS@", asserts).replace("@PRINTS@", prints))
    proc = subprocess.run(["g++", "-std=c++17", "-D__HIP_PLATFORM_AMD__", "-I", str(include), str(source),
                           "-o", str(d / "check")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-6000:]
    out = subprocess.run([d / "check"], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_every_hip_prototype_kir_uses_matches_the_installed_headers(header_values):
    # The static_asserts ran when the check compiled; the program's values are all there.
    assert set(header_values) == set(ENUMS)


def test_the_enum_values_kir_hard_codes_are_rocms(header_values):
    assert header_values["hipSuccess"] == 0  # every `!= 0` in the hook
    assert kir_constant(HOOK / "vendor_hip.cpp", "kMaxDynamicSharedMemorySize") == \
        header_values["hipFuncAttributeMaxDynamicSharedMemorySize"]
    assert kir_constant(HOOK / "override.cpp", "kNotFound") == header_values["hipErrorNotFound"]
    # The stub runtime (level 1) fails launches as a machine without a GPU does.
    stub = (build.HERE / "hip_stub_runtime.c").read_text()
    assert f"hipErrorNoDevice ({header_values['hipErrorNoDevice']})" in stub
    # The real-runtime app's own enum (tests/fixtures/hip_real_app.hip).
    app = (build.HERE / "hip_real_app.hip").read_text()
    for name in ("hipMemcpyHostToHost", "hipMemcpyHostToDevice", "hipMemcpyDeviceToHost"):
        assert f"{name} = {header_values[name]}" in app


def test_the_hipf_wrapper_kir_reads_is_the_one_clang_emits_and_rocm_accepts(tmp_path):
    """The wrapper __hipRegisterFatBinary gets: {u32 magic "HIPF", u32 version 1, void* bundle,
    void* unused} (clang CGCUDANV.cpp makeModuleCtorFunction; ROCm/clr hipamd/src/
    hip_platform.cpp, __CudaFatBinaryWrapper, checked against hip::__hipFatMAGIC2 and
    version 1). The headers do not declare it: the app clang-22 builds here is the witness,
    and the real runtime accepting it is test_hook_real_hip's registration test."""
    require(build.CLANG, "llvm-objcopy-22")
    app = tmp_path / "app.o"
    proc = subprocess.run([*build.HIP, "--offload-arch=gfx90a", "-c", str(build.HERE / "hip_real_app.hip"), "-o",
                           str(app)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    dump = tmp_path / "wrapper.bin"
    subprocess.run(["llvm-objcopy-22", f"--dump-section=.hipFatBinSegment={dump}", str(app), str(tmp_path / "x.o")],
                   check=True)
    wrapper = dump.read_bytes()
    magic = kir_constant(ROOT / "libkir" / "include" / "kir" / "cuda" / "fatbin.hpp", "kHipWrapperMagic")
    size = kir_constant(ROOT / "libkir" / "core" / "discover" / "wrapper.hpp", "kWrapperSize")
    assert len(wrapper) == size == 24
    assert struct.unpack_from("<II", wrapper) == (magic, 1)
    assert wrapper[:4] == b"FPIH"  # "HIPF", little-endian
    # kir finds the same wrapper and its bundle in the object file.
    assert [i.target for i in kir.open(app).images if i.kind == "code-object"] == ["gfx90a"]
