"""`kir hash`: kernel static hashes of real binaries, recomputed independently
(tests/support/hash_reference.py over bytes from cuobjdump or the fixture's own files)."""
from __future__ import annotations

import json
import struct
import subprocess

import hash_reference as ref


def hash_lines(kir_cli, *args):
    result = kir_cli("hash", "--jsonl", *args)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_kernels_with_embedded_ir_hash_their_ir(built, kir_cli):
    module = (built["proteus_cuda"].parent / ".proteus_cuda.work" / "dev.bc").read_bytes()
    lines = [h for h in hash_lines(kir_cli, built["proteus_cuda"]) if h["kernel"] == "_Z4axpyfPKfPfi"]
    assert lines and all(h["code"] == "ir" for h in lines)
    for h in lines:
        assert h["static"] == ref.static_hash("_Z4axpyfPKfPfi", "ir", [module])
        assert h["proteus"] == ref.proteus_static_hash("_Z4axpyfPKfPfi", [module], True)


def test_kernels_without_ir_hash_their_image(built, kir_cli, cuobjdump, tmp_path):
    subprocess.run([cuobjdump, "-xelf", "all", built["app"]], cwd=tmp_path, check=True,
                   capture_output=True)
    cubins = {p.name.split(".")[2]: p.read_bytes() for p in tmp_path.glob("app.*.cubin")
              if p.stat().st_size > 4000}  # the user's cubins, not cudart's
    for h in hash_lines(kir_cli, "--kernel", "axpy", built["app"]):
        if h["code"] == "cubin":
            assert h["static"] == ref.static_hash(h["kernel"], "cubin", [cubins[h["target"]]])
            assert h["proteus"] is None


def test_proteus_hip_hash_uses_the_section_hash(built, kir_cli):
    """HIP: Proteus's module hash folds the decimal suffixes of the code object's
    `.jit.bitcode*` section names (formats.md §5): here the TU section and axpy's, both
    named with the module's hash."""
    module = (built["proteus_hip.o"].parent / ".proteus_hip.o.work" / "dev.bc").read_bytes()
    result = kir_cli("hash", "--proteus", "--llvm-before-20", "--kernel", "axpy", built["proteus_hip.o"])
    [line] = result.stdout.splitlines()
    value = int(line.split()[0])
    suffix = ref.fnv1a_64(module)  # what the fixture wrote into both section names
    module_hash = ref.fnv1a_64(struct.pack("<QQ", suffix, suffix))
    assert value == ref.fnv1a_64(struct.pack("<QQ", ref.fnv1a_64(b"_Z4axpyfPKfPfi"), module_hash))


def test_dynamic_hash_from_the_command_line(kir_cli):
    static = ref.static_hash("k", "ir", [b"m"])
    result = kir_cli("hash", "--dynamic", static, "--arch", "sm_90", "--arg", "1:f32:2.0",
                     "--arg", "3:i32:256", "--arg", "4:bytes:00ff", "--grid", "4,1,1",
                     "--block", "256,1,1", "--bounds", "256,2", "--config", "opt=3")
    assert result.returncode == 0, result.stderr
    expected = ref.dynamic_hash(static, "sm_90",
                                args=[(1, "f32", struct.pack("<f", 2.0)), (3, "i32", struct.pack("<i", 256)),
                                      (4, "bytes", b"\x00\xff")],
                                grid=[4, 1, 1], block=[256, 1, 1], bounds=[256, 2],
                                config=[("opt", b"3")])
    assert result.stdout.strip() == expected


def test_jit_key_from_the_command_line(kir_cli):
    static = ref.static_hash("k", "ir", [b"m"])
    result = kir_cli("hash", "--jit-key", static, "--arch", "sm_90", "--arg", "3:i32:256", "--arg", "1:f64:2.5",
                     "--arg", "4:f64:1,2,3", "--arg", "5:bytes:00ff", "--block", "256,1,1", "--bounds", "256,2",
                     "--shared", "4096", "--capture", "main::{lambda(int)#1}:0:8:i32:7", "--config", "opt=3")
    assert result.returncode == 0, result.stderr
    expected = ref.jit_key(static, "sm_90",
                           args=[(1, "f64", struct.pack("<d", 2.5)), (3, "i32", struct.pack("<i", 256)),
                                 (4, "f64", struct.pack("<3d", 1, 2, 3)), (5, "bytes", b"\x00\xff")],
                           block=[256, 1, 1], bounds=[256, 2], shared_bytes=4096,
                           captures=[("main::{lambda(int)#1}", 0, 8, "i32", struct.pack("<i", 7))],
                           config=[("opt", b"3")])
    assert result.stdout.strip() == expected


def test_half_precision_arguments_hash_as_the_core_does(kir_cli):
    """f16 and bf16 arguments (kir_arg_type 9 and 10): the command line packs them as
    the core's ArgType says and the JIT key, the launch identity and format 1's hash
    agree with the core's builder and the independent reference."""
    from kir import _core, hashing
    static = ref.static_hash("k", "ir", [b"m"])
    half, bhalf = struct.pack("<e", 1.5), struct.pack("<H", 0x3FC0)  # 1.5 in IEEE half and in bfloat16
    result = kir_cli("hash", "--jit-key", static, "--arch", "sm_90", "--arg", "1:f16:1.5", "--arg", "2:bf16:1.5")
    assert result.returncode == 0, result.stderr
    args = [(1, "f16", half), (2, "bf16", bhalf)]
    assert result.stdout.strip() == ref.jit_key(static, "sm_90", args=args) == \
        hashing.jit_key(static, "sm_90", [(1, hashing.ArgType.f16, half), (2, hashing.ArgType.bf16, bhalf)])
    result = kir_cli("hash", "--dynamic", static, "--arch", "sm_90", "--arg", "1:f16:1.5", "--arg", "2:bf16:1.5")
    assert result.returncode == 0, result.stderr
    core = _core.DynamicHash(_core.HashDomain.dynamic_v1, _core.Hash128.from_hex(static), "sm_90")
    assert result.stdout.strip() == core.arg(1, hashing.ArgType.f16, half).arg(2, hashing.ArgType.bf16, bhalf).finish().hex
    result = kir_cli("hash", "--jit-key", static, "--arg", "1:f16:70000")  # past f16's range
    assert result.returncode == 2 and "--arg '1:f16:70000'" in result.stderr


def test_launch_identity_from_the_command_line(kir_cli):
    static = ref.static_hash("k", "ir", [b"m"])
    result = kir_cli("hash", "--launch-identity", static, "--arch", "sm_90", "--arg", "1:f32:2.5",
                     "--arg", "2:u64:0x7f0000000000", "--arg", "3:i32:256", "--grid", "4,1,1", "--block", "64,1,1",
                     "--shared", "128")
    assert result.returncode == 0, result.stderr
    args = [struct.pack("<f", 2.5), struct.pack("<Q", 0x7F0000000000), struct.pack("<i", 256)]
    assert result.stdout.strip() == ref.launch_identity(static, "sm_90", args, [4, 1, 1], [64, 1, 1], 128)


def test_bad_hash_arguments_exit_2(kir_cli):
    for args in (["--dynamic", "XYZ"], ["--dynamic", "0" * 32, "--arg", "1:i33:5"],
                 ["--dynamic", "0" * 32, "--grid", "1,2"], [],
                 ["--jit-key", "0" * 32, "--arg", "1:i32:1", "--arg", "1:i32:2"],
                 ["--jit-key", "0" * 32, "--shared", "-1"], ["--jit-key", "0" * 32, "--capture", "L:0:i32:1"],
                 ["--launch-identity", "0" * 32, "--grid", "1,1,1"],
                 ["--jit-key", "0" * 32, "--launch-identity", "0" * 32]):
        result = kir_cli("hash", *args)
        assert result.returncode == 2 and result.stderr.startswith("kir: error:"), args
