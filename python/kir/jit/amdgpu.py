"""AMDGPU code objects from an llvmlite module (docs/jit.md, "AMD GPUs").

The target is a target-id as ROCm spells it (clang/lib/Basic/TargetID.cpp,
parseTargetID; the HIP runtime's hipDeviceProp_t::gcnArchName): a processor and
its features, `gfx942`, `gfx90a:xnack+`, `gfx90a:sramecc+:xnack-`. The processor
is LLVM's CPU, each feature an LLVM target feature (+xnack / -sramecc), as
clang's driver turns `--offload-arch=gfx90a:xnack+` into `-target-cpu gfx90a
-target-feature +xnack` (clang/lib/Driver/ToolChains/AMDGPU.cpp,
amdgpu::getAMDGPUTargetFeatures). A feature left out is "any": the code runs in
either mode, as clang's.

llvmlite's LLVM (22) has the AMDGPU back end: it writes a relocatable object for
amdgcn-amd-amdhsa, and `ld.lld -shared` links it into the code object (an ELF
shared object with the kernel descriptors `<kernel>.kd` and the
NT_AMDGPU_METADATA note) that hipModuleLoadData loads, as clang's HIP toolchain
does (clang/lib/Driver/ToolChains/HIPAMD.cpp, AMDGCN::Linker::constructLldCommand:
`ld.lld -flavor gnu -m elf64_amdgpu --no-undefined -shared`) and Proteus's HIP
back end (src/include/proteus/impl/CoreLLVMHIP.h, codegenObject: lld `--no-undefined
-shared`).

The ROCm device libraries (ocml, ockl and the oclc_* control libraries) are linked
when the module calls them, chosen as clang chooses them
(clang/lib/Driver/ToolChains/AMDGPU.cpp, RocmInstallationDetector::
getCommonBitcodeLibs; `clang -### -x hip --offload-arch=gfx90a` lists them):
ocml, ockl, oclc_unsafe_math_off, oclc_finite_only_off,
oclc_correctly_rounded_sqrt_on, oclc_wavefrontsize64_on|off,
oclc_isa_version_<NNN>, oclc_abi_version_<code object version x 100>; each is
linked as `-mlink-builtin-bitcode` links it (clang/lib/CodeGen/BackendUtil.cpp /
CodeGenAction.cpp, LinkInModules: its definitions internal, so what is not called
goes)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from kir.errors import KirError, OptionError

AMDGPU_TRIPLE = "amdgcn-amd-amdhsa"
#: a target-id: processor, then features in any order (each at most once)
_TARGET_ID = re.compile(r"(gfx[0-9]+[0-9a-f]*)((?::(?:xnack|sramecc)[+-])*)")
#: what the device libraries define and a module built with -nogpulib calls
LIBRARY_PREFIXES = ("__ocml_", "__ockl_", "__oclc_")
#: where a ROCm install or Debian's rocm-device-libs put them (clang's
#: RocmInstallationDetector looks in <rocm>/amdgcn/bitcode; Debian's package
#: installs /usr/lib/<multiarch>/amdgcn/bitcode)
LIBRARY_DIRS = ("/opt/rocm/amdgcn/bitcode", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
                "/usr/lib/aarch64-linux-gnu/amdgcn/bitcode", "/usr/lib/amdgcn/bitcode")


def is_amdgpu(arch: str) -> bool:
    return isinstance(arch, str) and arch.startswith("gfx")


def parse_target_id(arch: str) -> tuple[str, list[str]]:
    """(processor, LLVM features) of a target-id: `gfx90a:xnack+` -> ("gfx90a", ["+xnack"])."""
    match = _TARGET_ID.fullmatch(arch) if isinstance(arch, str) else None
    if not match:
        raise OptionError(f"arch {arch!r}: expected an AMDGPU target-id, e.g. gfx942, gfx90a:xnack+, "
                          "gfx90a:sramecc+:xnack-")
    features = [f for f in match[2].split(":") if f]
    names = [f[:-1] for f in features]
    if len(set(names)) != len(names):
        raise OptionError(f"arch {arch!r}: a feature is given twice")
    return match[1], [f"{f[-1]}{f[:-1]}" for f in features]


def target_machine(arch: str, features: str, opt: int):
    """An AMDGPU target machine for `arch` (a target-id) with more `features`,
    position-independent as clang's (`-mrelocation-model pic`)."""
    import llvmlite.binding as llvm
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    cpu, own = parse_target_id(arch)
    target = llvm.Target.from_triple(AMDGPU_TRIPLE)
    return target.create_target_machine(cpu=cpu, features=",".join(own + [f for f in features.split(",") if f]),
                                        opt=opt, reloc="pic", codemodel="default")


def emit_object(module, machine) -> bytes:
    try:
        return machine.emit_object(module)
    except RuntimeError as error:
        raise KirError(f"LLVM's AMDGPU back end failed: {str(error).strip()}") from None


def find_lld() -> str | None:
    """ld.lld on PATH (or ld.lld-NN, newest first), or $ROCM_PATH/llvm/bin/ld.lld."""
    found = shutil.which("ld.lld")
    if found:
        return found
    for version in range(30, 13, -1):
        found = shutil.which(f"ld.lld-{version}")
        if found:
            return found
    for home in (os.environ.get("ROCM_PATH"), "/opt/rocm"):
        if home and (Path(home) / "llvm" / "bin" / "ld.lld").is_file():
            return str(Path(home) / "llvm" / "bin" / "ld.lld")
    return None


def link(obj: bytes) -> tuple[bytes, str]:
    """(code object, tool) of one relocatable object: `ld.lld -m elf64_amdgpu
    --no-undefined -shared` (HIPAMD.cpp, constructLldCommand)."""
    tool = find_lld()
    if tool is None:
        raise KirError("ld.lld not found (on PATH as ld.lld or ld.lld-NN, or $ROCM_PATH/llvm/bin): install "
                       "lld (Debian: apt-get install lld), which links an AMDGPU code object")
    with tempfile.TemporaryDirectory(prefix="kir-jit-") as work:
        source, out = Path(work) / "kernel.o", Path(work) / "kernel.hsaco"
        source.write_bytes(obj)
        proc = subprocess.run([tool, "-m", "elf64_amdgpu", "--no-undefined", "-shared", str(source), "-o", str(out)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise KirError(f"ld.lld failed (exit {proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        version = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
        release = re.search(r"LLD (\d+[.\d]*)", version)
        return out.read_bytes(), f"ld.lld {release[1] if release else ''}".strip()


# --- the ROCm device libraries ---------------------------------------------------

def called(module) -> list[str]:
    """The device-library functions and variables (__ocml_*, __ockl_*, __oclc_*) a
    module declares without defining."""
    names = [f.name for f in module.functions if f.is_declaration and f.name.startswith(LIBRARY_PREFIXES)]
    names += [g.name for g in module.global_variables if g.is_declaration and g.name.startswith(LIBRARY_PREFIXES)]
    return sorted(names)


def library_dirs() -> list[Path]:
    """Where the device libraries are looked for, in order: $HIP_DEVICE_LIB_PATH (as
    clang reads it), $ROCM_PATH/amdgcn/bitcode, then LIBRARY_DIRS."""
    dirs = [os.environ.get("HIP_DEVICE_LIB_PATH")]
    if os.environ.get("ROCM_PATH"):
        dirs.append(str(Path(os.environ["ROCM_PATH"]) / "amdgcn" / "bitcode"))
    return [Path(d) for d in [*dirs, *LIBRARY_DIRS] if d]


def library_names(cpu: str, wave64: bool, abi_version: int) -> list[str]:
    """The bitcode files clang-22 links for a HIP device compile of `cpu` (default
    math flags), in its order (getCommonBitcodeLibs)."""
    isa = cpu[3:]
    return ["ocml.bc", "ockl.bc", "oclc_unsafe_math_off.bc", "oclc_finite_only_off.bc",
            "oclc_correctly_rounded_sqrt_on.bc", f"oclc_wavefrontsize64_{'on' if wave64 else 'off'}.bc",
            f"oclc_isa_version_{isa}.bc", f"oclc_abi_version_{abi_version}.bc"]


def find_libraries(cpu: str, wave64: bool, abi_version: int, calls=(), directory: str | None = None) -> list[Path]:
    """The device libraries for `cpu` from `directory`, else the first of
    library_dirs() that has ocml.bc; KirError naming each file missing and where it
    looked."""
    names = library_names(cpu, wave64, abi_version)
    needed = f"the IR calls {', '.join(list(calls)[:3])}{', ...' if len(calls) > 3 else ''}: " if calls else ""
    looked = [Path(directory)] if directory is not None else library_dirs()
    for directory in looked:
        if (directory / "ocml.bc").is_file():
            missing = [n for n in names if not (directory / n).is_file()]
            if missing:
                raise KirError(f"{needed}the ROCm device libraries in {directory} lack {', '.join(missing)} "
                               f"(needed for {cpu}, code object version {abi_version // 100}); a newer ROCm's "
                               "libraries have them (set HIP_DEVICE_LIB_PATH or ROCM_PATH)")
            return [directory / n for n in names]
    raise KirError(f"{needed}the ROCm device libraries (ocml.bc, ockl.bc, oclc_*.bc) are not in "
                   f"{', '.join(map(str, looked))}: install them (Debian: apt-get install rocm-device-libs; "
                   "or a ROCm install) or set HIP_DEVICE_LIB_PATH")


def code_object_version(module) -> int:
    """The module's "amdhsa_code_object_version" flag (500 for version 5), else
    LLVM 22's default, 600 (what clang-22 writes)."""
    found = re.search(r'!\{i32 \d+, !"amdhsa_code_object_version", i32 (\d+)\}', str(module))
    return int(found[1]) if found else 600


def wave64(cpu: str, features: str) -> bool:
    """Wave64 code: gfx6-9 run only wave64; gfx10+ default to wave32 unless
    +wavefrontsize64 is asked for (the kernel's target-features or the options)."""
    if "+wavefrontsize64" in features:
        return True
    if "+wavefrontsize32" in features:
        return False
    major = re.match(r"gfx(\d+?)[0-9a-f]{2}$", cpu)
    return major is None or int(major[1]) < 10


def link_libraries(module, paths: list[Path]) -> None:
    """Link each library into the llvmlite `module`, its definitions internal
    (-mlink-builtin-bitcode): the optimizer inlines what is called, drops the rest."""
    import llvmlite.binding as llvm

    from kir.files import read_file
    from kir.record import MAX_CHUNK_BYTES
    own = {f.name for f in module.functions if not f.is_declaration}
    own |= {g.name for g in module.global_variables if not g.is_declaration}
    for path in paths:
        try:
            library = llvm.parse_bitcode(read_file(path, f"device library {path}", MAX_CHUNK_BYTES, KirError))
        except RuntimeError as error:
            raise KirError(f"device library {path}: llvmlite cannot read it: {str(error).strip()}") from None
        library.triple = module.triple
        library.data_layout = module.data_layout
        module.link_in(library)
    for value in [*module.functions, *module.global_variables]:
        if not value.is_declaration and value.name not in own and not value.name.startswith("llvm."):
            value.linkage = llvm.Linkage.internal


__all__ = ["AMDGPU_TRIPLE", "called", "code_object_version", "emit_object", "find_libraries", "find_lld",
           "is_amdgpu", "LIBRARY_DIRS", "library_dirs", "library_names", "link", "link_libraries",
           "parse_target_id", "target_machine", "wave64"]
