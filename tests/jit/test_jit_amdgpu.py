"""kir.jit for AMD GPUs (docs/jit.md, "AMD GPUs"): HIP device IR that clang-22 writes
(-x hip --cuda-device-only -nogpulib -emit-llvm) specialized and compiled by llvmlite's
AMDGPU back end, linked by ld.lld into a code object, its NT_AMDGPU_METADATA note
(llvm-readelf --notes) compared with clang-22's own code object of the same kernel;
runtime constants, dims and launch bounds as Proteus's HIP back end sets them; the
ROCm device libraries (Debian's rocm-device-libs) linked as clang links them; the
JIT key covering the whole target-id. No AMD GPU is needed: nothing here loads the
code (tests/jit/test_jit_amdgpu_gpu.py does, on an MI250X/MI300A)."""
from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import yaml

import hash_reference
from kir import hashing, jit
from kir.errors import KirError, OptionError
from kir.jit import amdgpu

CLANG, READELF = "clang-22", "llvm-readelf-22"
F32 = 11  #: kir_arg_type's f32 (docs/hashing.md)

pytestmark = pytest.mark.skipif(not (shutil.which(CLANG) and shutil.which(READELF) and amdgpu.find_lld()),
                                reason="needs clang-22, llvm-readelf-22 and ld.lld (install-system-deps.sh --tests)")

#: What the HIP headers give a kernel, without ROCm's headers: the grid/block helpers
#: under the names HIP's amd_hip_runtime.h gives them (Proteus replaces calls to
#: them: CoreLLVMHIP.h, gridDimXFnName / blockDimXFnName), reading what the HIP
#: headers read (the device library's __ockl_get_local_size / __ockl_get_num_groups).
HEADER = r"""
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
extern "C" __device__ unsigned long __ockl_get_local_size(unsigned);
extern "C" __device__ unsigned long __ockl_get_num_groups(unsigned);
static __device__ unsigned __hip_get_block_dim_x() { return __ockl_get_local_size(0); }
static __device__ unsigned __hip_get_grid_dim_x() { return __ockl_get_num_groups(0); }
"""
SCALE = HEADER + r"""
extern "C" __global__ void scale(double a, double *x, int n) {
  unsigned i = __builtin_amdgcn_workgroup_id_x() * __hip_get_block_dim_x() + __builtin_amdgcn_workitem_id_x();
  unsigned stride = __hip_get_grid_dim_x() * __hip_get_block_dim_x();
  for (; i < (unsigned)n; i += stride) x[i] = a * x[i];
}
"""
#: no device-library calls at all: the kernel clang-22 -nogpulib compiles into a code object
PLAIN = r"""
#define __global__ __attribute__((global))
struct Pair { float a; int b; };
extern "C" __global__ void plain(float a, float *x, int n, Pair p) {
  __attribute__((shared)) float tile[64];
  unsigned i = __builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x()
               + __builtin_amdgcn_workitem_id_x();
  tile[i % 64] = a * p.a;
  __builtin_amdgcn_s_barrier();
  if (i < (unsigned)n) x[i] = tile[(i + 1) % 64] + p.b;
}
"""
SINE = HEADER + r"""
extern "C" __device__ double __ocml_sin_f64(double);
extern "C" __global__ void sine(double *x, int n) {
  unsigned i = __builtin_amdgcn_workgroup_id_x() * __hip_get_block_dim_x() + __builtin_amdgcn_workitem_id_x();
  if (i < (unsigned)n) x[i] = __ocml_sin_f64(x[i]);
}
"""


def hip(tmp_path: Path, source: str, arch: str, *flags: str, ir: bool = True) -> bytes:
    """clang-22's device output for `source`: LLVM IR text (ir) or a code object."""
    src = tmp_path / "k.hip"
    src.write_text(source)
    out = tmp_path / ("k.ll" if ir else "k.hsaco")
    kind = ["-emit-llvm", "-S"] if ir else ["--no-gpu-bundle-output", "-c"]
    subprocess.run([CLANG, "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
                    *flags, *kind, str(src), "-o", str(out)], check=True, capture_output=True)
    return out.read_bytes()


def notes(code: bytes, tmp_path: Path, name: str = "code.hsaco") -> dict:
    """The NT_AMDGPU_METADATA note of a code object, as llvm-readelf-22 --notes prints it."""
    path = tmp_path / name
    path.write_bytes(code)
    text = subprocess.run([READELF, "--notes", str(path)], check=True, capture_output=True, text=True).stdout
    assert "NT_AMDGPU_METADATA" in text
    start, end = text.index("---"), text.index("\n...", text.index("---"))
    return yaml.safe_load(text[start:end])


def kernel_of(meta: dict, name: str) -> dict:
    return next(k for k in meta["amdhsa.kernels"] if k[".name"] == name)


def symbols(code: bytes, tmp_path: Path) -> str:
    path = tmp_path / "sym.hsaco"
    path.write_bytes(code)
    return subprocess.run([READELF, "-s", "-h", str(path)], check=True, capture_output=True, text=True).stdout


# --- item 1: a code object, as clang-22 makes one ------------------------------------

@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_code_object_metadata_matches_clang(tmp_path, arch):
    """The same IR: kir.jit's code object and clang-22's (-x hip --offload-arch
    -nogpulib --cuda-device-only) carry the same kernel, kernel descriptor and
    metadata: .kernarg_segment_size, .group_segment_fixed_size, .max_flat_workgroup_size,
    the arguments (offsets, sizes, kinds, the hidden ones included), the target."""
    ir = hip(tmp_path, PLAIN, arch, "-O3")
    compiled = jit.compile(ir, "plain", arch)
    assert compiled.kind == "code-object" and compiled.code[:4] == b"\x7fELF"
    ours = notes(compiled.code, tmp_path, "ours.hsaco")
    theirs = notes(hip(tmp_path, PLAIN, arch, "-O3", ir=False), tmp_path, "clang.hsaco")
    assert ours["amdhsa.target"] == theirs["amdhsa.target"] == f"amdgcn-amd-amdhsa--{arch}"
    assert ours["amdhsa.version"] == theirs["amdhsa.version"]
    mine, clang = kernel_of(ours, "plain"), kernel_of(theirs, "plain")
    for field in (".symbol", ".kernarg_segment_size", ".kernarg_segment_align", ".group_segment_fixed_size",
                  ".max_flat_workgroup_size", ".wavefront_size", ".args", ".uniform_work_group_size"):
        assert mine.get(field) == clang.get(field), field
    assert mine[".group_segment_fixed_size"] == 64 * 4
    assert [a[".value_kind"] for a in mine[".args"][:4]] == ["by_value", "global_buffer", "by_value", "by_value"]
    table = symbols(compiled.code, tmp_path)
    assert "plain.kd" in table and "AMDGPU" in table and "DYN (Shared object file)" in table
    # kir's own code-object parser reads what it needs from it (libkir amdgpu/code_object)
    assert compiled.resources.shared_bytes == 256 and compiled.resources.tool.startswith("ld.lld")


def test_target_id_features_reach_the_code_object(tmp_path):
    """gfx90a:xnack+ / :xnack- / :sramecc+:xnack-: the code object's target is the
    target-id, as clang-22's for the same --offload-arch; plain gfx90a is "any"."""
    ir = hip(tmp_path, PLAIN, "gfx90a", "-O3")
    for arch in ("gfx90a:xnack+", "gfx90a:xnack-", "gfx90a:sramecc+:xnack-", "gfx90a"):
        ours = notes(jit.compile(ir, "plain", arch).code, tmp_path)["amdhsa.target"]
        theirs = notes(hip(tmp_path, PLAIN, arch, "-O3", ir=False), tmp_path, "c.hsaco")["amdhsa.target"]
        assert ours == theirs == f"amdgcn-amd-amdhsa--{arch}", arch


def test_retargeting_ir_built_for_another_gfx(tmp_path):
    """IR clang built for gfx90a, compiled for gfx942: the code object is gfx942's."""
    ir = hip(tmp_path, PLAIN, "gfx90a", "-O3")
    assert notes(jit.compile(ir, "plain", "gfx942").code, tmp_path)["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx942"


@pytest.mark.parametrize("arch", ["gfx", "gfx90a:xnack", "gfx90a:xnack+:xnack-", "gfx90a:foo+", "sm90"])
def test_bad_target_ids(tmp_path, arch):
    with pytest.raises(OptionError, match="arch"):
        jit.compile("", "k", arch)


def test_nvidia_ir_for_an_amd_target_and_back(tmp_path):
    ir = hip(tmp_path, PLAIN, "gfx942", "-O3")
    with pytest.raises(OptionError, match="amdgcn.*sm_90|is for amdgcn"):
        jit.compile(ir, "plain", "sm_90")
    with pytest.raises(OptionError, match="PTX"):
        jit.compile(ir, "plain", "gfx942", options={"kind": "ptx"})


# --- the ROCm device libraries ------------------------------------------------------

def test_device_library_calls_without_the_libraries(tmp_path):
    """A module calling __ocml_*: with no device libraries anywhere, a one-line error
    naming what the IR calls, which files, and where kir looked."""
    ir = hip(tmp_path, SINE, "gfx90a", "-O3", "-mcode-object-version=5")
    with pytest.raises(KirError, match=r"^the IR calls __ockl_get_local_size, __ocml_sin_f64: the ROCm device "
                                       r"libraries \(ocml.bc, ockl.bc, oclc_\*.bc\) are not in .*/none: install"):
        jit.compile(ir, "sine", "gfx90a", options={"device_libs": str(tmp_path / "none")})


def _libraries():
    return next((d for d in amdgpu.library_dirs() if (d / "ocml.bc").is_file()), None)


@pytest.mark.skipif(_libraries() is None, reason="needs ROCm's device libraries (rocm-device-libs)")
def test_device_libraries_linked_as_clang_links_them(tmp_path):
    """__ocml_sin_f64 and __ockl_get_local_size resolved from ocml/ockl with the oclc
    control libraries clang-22 picks for gfx90a, code object v5 (`clang -###`
    lists the same files); nothing undefined is left (ld.lld --no-undefined)."""
    ir = hip(tmp_path, SINE, "gfx90a", "-O3", "-mcode-object-version=5")
    compiled = jit.compile(ir, "sine", "gfx90a")
    assert "__ocml_sin_f64" not in compiled.assembly and "__ockl" not in compiled.assembly
    driver = subprocess.run([CLANG, "-###", "-x", "hip", "--offload-arch=gfx90a", "--cuda-device-only",
                             "-mcode-object-version=5", f"--rocm-device-lib-path={_libraries()}", "-nogpuinc",
                             "-c", str(tmp_path / "k.hip")], capture_output=True, text=True).stderr
    picked = [Path(p).name for p in re.findall(r'"-mlink-builtin-bitcode" "([^"]+)"', driver)]
    assert picked == amdgpu.library_names("gfx90a", True, 500)
    assert kernel_of(notes(compiled.code, tmp_path), "sine")[".name"] == "sine"


@pytest.mark.skipif(_libraries() is None, reason="needs ROCm's device libraries (rocm-device-libs)")
def test_device_libraries_missing_a_control_library(tmp_path):
    """Debian's libraries (ROCm 5.2) have no oclc_abi_version_600 (clang-22's default
    code object version 6): the error names the missing file, as clang's driver does."""
    ir = hip(tmp_path, SINE, "gfx90a", "-O3")  # code object version 6
    if (_libraries() / "oclc_abi_version_600.bc").is_file():
        pytest.skip("these device libraries have code object version 6")
    with pytest.raises(KirError, match=r"lack oclc_abi_version_600\.bc \(needed for gfx90a, code object version 6\)"):
        jit.compile(ir, "sine", "gfx90a")


# --- item 2: specialization as Proteus's HIP back end does it ------------------------

def wrapper_attributes(ir: bytes, kernel: str, spec: dict) -> set[str]:
    """The function attributes of the specialized kernel (kir.jit.transform)."""
    import llvmlite.binding as llvm

    from kir.jit import transform
    from kir.jit.values import Specialization
    out, _ = transform.specialize(llvm.parse_assembly(ir.decode()), kernel, Specialization.coerce(spec), "gfx942")
    return set(transform._tokens(" ".join(a.decode() for a in out.get_function(kernel).attributes)))


def test_specialized_constant_dims_and_bounds_in_the_code_object(tmp_path):
    """The IR Proteus embeds (clang -O3 before LLVM's passes: -Xclang
    -disable-llvm-passes): a=2.5, block 128, grid 4, bounds (128, 2). The constant
    is in the ISA and the argument is not read; the dim helpers are gone; the
    launch bounds are "amdgpu-flat-work-group-size"="1,128" (.max_flat_workgroup_size
    128) and "amdgpu-waves-per-eu"="2,2" (occupancy 2)."""
    ir = hip(tmp_path, SCALE, "gfx942", "-O3", "-Xclang", "-disable-llvm-passes")
    text = ir.decode()
    assert "@_ZL21__hip_get_block_dim_xv()" in text and "@_ZL20__hip_get_grid_dim_xv()" in text
    dims = {"block": (128, 1, 1), "grid": (4, 1, 1)}  # the __ockl_* reads folded: no device library needed
    plain = jit.compile(ir, "scale", "gfx942", dims)
    spec = jit.compile(ir, "scale", "gfx942", {"args": [(1, "f64", 2.5)], "bounds": (128, 2), **dims})
    assert spec.transform.replaced_args == [1]
    # two calls of __hip_get_block_dim_x and one of __hip_get_grid_dim_x (Proteus's names), and
    # the __ockl_* call in each helper's body
    assert spec.transform.replaced_dims == {"ntid.x": 3, "nctaid.x": 2}
    # 2.5 = 0x4004000000000000: a 32-bit literal (high word) in the ISA, only when specialized
    assert "0x40040000" in spec.assembly and "0x40040000" not in plain.assembly
    assert "__ockl" not in spec.assembly and "__ockl" not in plain.assembly
    mine = kernel_of(notes(spec.code, tmp_path), "scale")
    assert mine[".max_flat_workgroup_size"] == 128
    assert kernel_of(notes(plain.code, tmp_path), "scale")[".max_flat_workgroup_size"] == 1024
    assert spec.resources.max_threads == [128, 1, 1]
    # "amdgpu-waves-per-eu" leaves no trace in a code object this small: the kernel's attributes
    assert wrapper_attributes(ir, "scale", {"bounds": (128, 2)}) >= {
        '"amdgpu-flat-work-group-size"="1,128"', '"amdgpu-waves-per-eu"="2,2"'}


def test_object_argument_passed_byref(tmp_path):
    """HIP passes a struct kernel argument `byref` in the constant address space
    (ptr addrspace(4) byref(%struct.Pair)): specialized from its bytes, its value
    (1.5 = 0x3fc00000) is in the ISA."""
    ir = hip(tmp_path, PLAIN, "gfx942", "-O3")
    assert "ptr addrspace(4) noundef readonly byref(%struct.Pair)" in ir.decode()
    spec = jit.compile(ir, "plain", "gfx942", {"args": [(4, "bytes", struct.pack("<fi", 1.5, 7))]})
    assert spec.transform.replaced_args == [4]
    assert "0x3fc00000" in spec.assembly and "0x3fc00000" not in jit.compile(ir, "plain", "gfx942").assembly
    with pytest.raises(OptionError, match="the object value has 4 bytes, it needs 8"):
        jit.compile(ir, "plain", "gfx942", {"args": [(4, "bytes", b"1234")]})


def test_ockl_dims_folded_in_optimized_ir(tmp_path):
    """Optimized HIP IR (what ROCm's headers leave: __ockl_get_local_size(0) calls):
    the block and grid reads become constants, so no device library is needed."""
    ir = hip(tmp_path, SCALE, "gfx942", "-O3")
    assert "@__ockl_get_local_size(i32 noundef 0)" in ir.decode()
    spec = jit.compile(ir, "scale", "gfx942", {"block": (64, 1, 1), "grid": (8, 1, 1)})
    assert spec.transform.replaced_dims == {"ntid.x": 2, "nctaid.x": 1}
    assert "__ockl" not in spec.assembly
    # the grid read at run time: __ockl_get_num_groups stays, and needs the device libraries
    with pytest.raises(KirError, match="^the IR calls __ockl_get_num_groups: the ROCm device libraries"):
        jit.compile(ir, "scale", "gfx942", {"block": (64, 1, 1)}, {"device_libs": str(tmp_path)})


def test_bounds_without_minimum(tmp_path):
    """bounds (256, 0): "1,256", no "amdgpu-waves-per-eu" (the occupancy is the
    back end's own, as without bounds)."""
    ir = hip(tmp_path, PLAIN, "gfx942", "-O3")
    spec = jit.compile(ir, "plain", "gfx942", {"bounds": (256, 0)})
    plain = jit.compile(ir, "plain", "gfx942")
    assert kernel_of(notes(spec.code, tmp_path), "plain")[".max_flat_workgroup_size"] == 256
    assert kernel_of(notes(plain.code, tmp_path), "plain")[".max_flat_workgroup_size"] == 1024
    attributes = wrapper_attributes(ir, "plain", {"bounds": (256, 0)})
    assert '"amdgpu-flat-work-group-size"="1,256"' in attributes
    assert not any("waves-per-eu" in a for a in attributes)


# --- §5: the JIT key covers the target-id ---------------------------------------------

def test_jit_key_covers_the_whole_target_id(tmp_path):
    """gfx90a:xnack+, gfx90a:xnack- and gfx90a are three keys: kir.jit's key uses the
    target-id as given, and kir_jit_key hashes the arch string as it is."""
    ir = hip(tmp_path, PLAIN, "gfx90a", "-O3")
    static = "0" * 31 + "1"
    keys = {}
    for arch in ("gfx90a:xnack+", "gfx90a:xnack-", "gfx90a", "gfx90a:sramecc+:xnack-"):
        compiled = jit.compile(ir, "plain", arch, {"args": [(1, "f32", 2.0)]}, static_hash=static)
        assert jit.key_inputs(compiled)["arch"] == arch
        keys[arch] = jit.jit_key(compiled)
        # the key a JIT client computes at the launch, from the target-id the runtime reports
        assert keys[arch] == hashing.jit_key(static, arch, [(1, F32, struct.pack("<f", 2.0))],
                                             config=compiled.config)
        # and the independent reference of the key's encoding hashes the ARCH text as it is
        assert keys[arch] == hash_reference.jit_key(static, arch, args=[(1, F32, struct.pack("<f", 2.0))],
                                                    config=compiled.config)
    assert len(set(keys.values())) == 4
    assert json.dumps(jit.compile(ir, "plain", "gfx90a:xnack+").summary())  # JSON-ready


def test_jit_key_takes_the_target_id_in_canonical_form(tmp_path):
    """The features of a target-id in another order are the same target (clang's
    getCanonicalTargetID sorts them; gcnArchName reports them sorted): one key, in
    kir_jit_key (C++) and in the independent reference. Another feature setting, or
    none (Proteus's DeviceArch, gcnArchName cut at the first ':'), is another key."""
    ir = hip(tmp_path, PLAIN, "gfx90a", "-O3")
    static = "0" * 31 + "1"
    args = [(1, F32, struct.pack("<f", 2.0))]
    config = jit.Options(kind="code-object").config()

    def key(arch: str) -> str:
        return hashing.jit_key(static, arch, args, config=config)
    canonical = key("gfx90a:sramecc+:xnack-")
    assert key("gfx90a:xnack-:sramecc+") == canonical
    assert hash_reference.jit_key(static, "gfx90a:xnack-:sramecc+", args=args, config=config) == canonical
    compiled = jit.compile(ir, "plain", "gfx90a:xnack-:sramecc+", {"args": [(1, "f32", 2.0)]}, static_hash=static)
    assert jit.jit_key(compiled) == canonical  # the code kir.jit compiled is stored under the device's key
    others = {key(a) for a in ("gfx90a:sramecc-:xnack-", "gfx90a:sramecc+:xnack+", "gfx90a:xnack-", "gfx90a")}
    assert len(others) == 4 and canonical not in others


# --- the command line ----------------------------------------------------------------

def test_cli_compiles_a_hip_binarys_embedded_ir(built, tmp_path):
    """`kir jit compile BINARY --arch gfx90a:xnack+`: the IR the Proteus pass embeds
    in a HIP binary (proteus_hip.o), specialized, written (-o) and stored (--cache)
    under a key of the whole target-id: :xnack- is another entry."""
    from kir.cache import Cache
    from running import run_kir
    binary = built["proteus_hip.o"]
    out = tmp_path / "axpy.hsaco"
    common = ["jit", "compile", binary, "--kernel", "_Z4axpyfPKfPfi", "--arg", "1:f32:2.5", "--bounds", "256,2",
              "--cache", tmp_path / "cache", "--json"]
    plus = run_kir(*common, "--arch", "gfx90a:xnack+", "-o", out)
    assert plus.returncode == 0, plus.stderr
    summary = json.loads(plus.stdout)
    assert summary["kind"] == "code-object" and summary["arch"] == "gfx90a:xnack+"
    meta = notes(out.read_bytes(), tmp_path)
    assert meta["amdhsa.target"] == "amdgcn-amd-amdhsa--gfx90a:xnack+"
    assert kernel_of(meta, "_Z4axpyfPKfPfi")[".max_flat_workgroup_size"] == 256
    minus = json.loads(run_kir(*common, "--arch", "gfx90a:xnack-").stdout)
    assert minus["key"] != summary["key"]
    cache = Cache(str(tmp_path / "cache"))
    entries = {key: cache.lookup(key) for key in (summary["key"], minus["key"])}
    assert {e.arch for e in entries.values()} == {"gfx90a:xnack+", "gfx90a:xnack-"}
    assert all(e.kind == "code-object" for e in entries.values())
    assert entries[summary["key"]].code == out.read_bytes()
    bad = run_kir("jit", "compile", binary, "--kernel", "_Z4axpyfPKfPfi", "--arch", "gfx90a:xnack+:xnack-")
    assert bad.returncode == 2 and bad.stderr.startswith("kir: error: arch 'gfx90a:xnack+:xnack-'")
