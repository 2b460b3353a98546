"""Hook API 4: a kernel's runtime-constant (JIT) arguments, captured from the
Proteus ABI, and kept in records.

A C program does what the Proteus pass makes a registration do (Proteus
src/pass/ProteusPass.cpp: getProteusCreateRuntimeConstantInfo*Fn,
getJitRegisterFunctionFn): after the runtime registered the kernel, it creates
one RuntimeConstantInfo per annotated argument with 0-based positions and
Proteus's RuntimeConstantType numbers (include/proteus/CompilerInterfaceTypes.h),
and passes the array of their pointers to __proteus_register_function. It runs
with a stand-in Proteus runtime (which must get every call, and its own objects
back) and without one (the layer answers). The layer must list the arguments in
kir_hook_kernel.jit_args, 1-based, with kir_arg_type values."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import kir
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)
from kir import _core
from kir.record import JitArg, Record
from stub_cuda import STUBS

HOOK = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
INCLUDE = Path(kir.__file__).parent / "include"
AXPY = "_Z4axpyfPKfPfi"

# Proteus's RuntimeConstantType values.
BOOL, INT8, INT32, INT64, FLOAT, DOUBLE, LONG_DOUBLE, PTR, STATIC_ARRAY, VECTOR, ARRAY, OBJECT = range(1, 13)

PROTEUS = source("hook/hook_jit_args_proteus.c")

APP = source("hook/hook_jit_args_app.c")


@pytest.fixture(scope="module")
def programs(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("jitargs")
    (d / "proteus.c").write_text(PROTEUS)
    defines = {"FLOAT": FLOAT, "STATIC_ARRAY": STATIC_ARRAY, "DOUBLE": DOUBLE, "ARRAY": ARRAY, "INT32": INT32,
               "INT64": INT64, "OBJECT": OBJECT, "BOOL": BOOL}
    (d / "app.c").write_text(APP.replace("AXPY", AXPY))

    def cc(*args):
        subprocess.run(["gcc", "-Wall", *map(str, args)], check=True, cwd=d)

    cc("-shared", "-fPIC", STUBS / "runtime.c", "-Wl,-soname,libcudart.so", "-o", "libcudart.so")
    cc("-shared", "-fPIC", "proteus.c", "-o", "libproteus.so")
    flags = [f"-D{k}={v}" for k, v in defines.items()] + [f"-I{INCLUDE}", "app.c", f"-L{d}", "-l:libcudart.so",
                                                          "-ldl", *rpath(d)]
    cc(*flags, "-DWEAK=", "-l:libproteus.so", "-o", "with_proteus")
    # Without Proteus the ABI is the hook's alone (weak references, bound to the preload).
    cc(*flags, "-DWEAK=__attribute__((weak))", "-o", "without_proteus")
    # The same as a library, for a Python process that asks kir.hook afterwards.
    cc(*flags, "-DWEAK=__attribute__((weak))", "-Dmain=jit_main", "-shared", "-fPIC", "-o", "libjitapp.so")
    return d, built["kernels.fatbin"]


def run(programs, name):
    d, fatbin = programs
    proc = subprocess.run([d / name, fatbin], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "LD_LIBRARY_PATH": str(d),
                               "KIR_HOOK_LOG": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


# (position, kind, kir_arg_type, by_value, count, count_type, count_position), kir/kir.h values:
# KIR_JIT_SCALAR 0 / ARRAY 1 / OBJECT 2; KIR_ARG_I32 3, I64 4, F32 11, F64 12, BYTES 14, BOOL 15.
EXPECTED = [
    (1, 0, 11, 0, 0, 0, 0),   # FLOAT at Pos 0
    (2, 1, 12, 1, 4, 0, 0),   # STATIC_ARRAY of 4 DOUBLE at Pos 1: the argument's own bytes
    (3, 1, 3, 0, 0, 4, 4),    # ARRAY of INT32 at Pos 2, its count the INT64 at Pos 3
    (5, 2, 14, 1, 24, 0, 0),  # OBJECT of 24 bytes by value at Pos 4
    (7, 0, 15, 0, 0, 0, 0),   # BOOL at Pos 6
]


def jit_lines(proc):
    return [tuple(int(v) for v in l.split()[2:]) for l in proc.stdout.splitlines() if l.startswith(f"jit {AXPY} ")]


@pytest.mark.parametrize("name", ["with_proteus", "without_proteus"])
def test_jit_arguments_are_captured_from_the_proteus_abi(programs, name):
    proc = run(programs, name)
    assert jit_lines(proc) == EXPECTED
    # The one description kir cannot express is a failure, logged, not an argument.
    errors = [l for l in proc.stderr.splitlines() if l.startswith("kir-hook: error:")]
    assert len(errors) == 2, proc.stderr
    assert "__proteus_create_runtime_constant_info_scalar(position 5)" in errors[0]
    assert f'__proteus_register_function("{AXPY}"): 1 of its 6 runtime constants' in errors[1]
    assert "failures 2" in proc.stdout


def test_proteus_gets_every_call_and_its_own_objects(programs):
    proc = run(programs, "with_proteus")
    registered = [l for l in proc.stdout.splitlines() if l.startswith("proteus registered")]
    assert registered == [f"proteus registered {AXPY} ours:{FLOAT}:0 ours:{STATIC_ARRAY}:1 ours:{ARRAY}:2 "
                          f"ours:{OBJECT}:4 ours:99:5 ours:{BOOL}:6"]
    assert "proteus registered" not in run(programs, "without_proteus").stdout


def test_records_carry_the_jit_arguments(programs, tmp_path):
    """The recorder writes a kernel's jit_args as the hook holds them (recorder.cpp);
    the C++ writer's `kernel.jit_args` reads back through kir.record. Records without
    the key read as having none."""
    captured = jit_lines(run(programs, "without_proteus"))
    kinds = ("scalar", "array", "object")

    from kir.hashing import static_hash
    h = static_hash(AXPY, "cubin", [b"x"])
    for sub, args in (("with", captured), ("without", None)):
        b = _core.RecordBuilder(str(tmp_path / sub), 4096)
        b.set_process(1, -1)
        b.set_device("NVIDIA H200", "sm_90", 0)
        b.set_kernel(AXPY, "axpy(float, float const*, float*, int)", h, [0, 8, 16, 24], [4, 8, 8, 4])
        b.set_image("cubin", "sm_90", b"\x7fELF fake")
        if args is not None:
            b.set_jit_args([(p, kinds[k], t, bool(v), c, ct, cp) for p, k, t, v, c, ct, cp in args])
        b.set_launch("cudaLaunchKernel", h, (1, 1, 1), (32, 1, 1), 0, 0, [b"\0" * 4, b"\0" * 8, b"\0" * 8, b"\0" * 4], 0)
        rec = Record.load(b.write())
        if args is None:
            assert rec.kernel.jit_args == []
        else:
            assert rec.kernel.jit_args == [JitArg(p, kinds[k], t, bool(v), c, ct, cp) for p, k, t, v, c, ct, cp in args]


QUERY = r"""
import ctypes, json, sys
import kir.hook
app = ctypes.CDLL(sys.argv[1])
argv = (ctypes.c_char_p * 2)(b"app", sys.argv[2].encode())
app.jit_main(2, argv)
k = next(k for k in kir.hook.kernels() if k.name == sys.argv[3])
print("jit_args", json.dumps([[a.position, a.kind, a.type, a.by_value, a.count, a.count_type, a.count_position]
                              for a in k.jit_args]))
"""


def test_python_sees_the_jit_arguments(programs):
    """The C library's printf output and Python's share one pipe, each buffered on
    its own: without PYTHONUNBUFFERED (a new user's environment) the C lines come
    out last, so the answer is found by its label, not by its place."""
    import json
    import os
    import sys
    d, fatbin = programs
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = subprocess.run([sys.executable, "-c", QUERY, str(d / "libjitapp.so"), str(fatbin), AXPY],
                          capture_output=True, text=True, timeout=60,
                          env={**env, "LD_PRELOAD": str(HOOK), "LD_LIBRARY_PATH": str(d)})
    assert proc.returncode == 0, proc.stderr
    kinds = ("scalar", "array", "object")
    answers = [l.split(" ", 1)[1] for l in proc.stdout.splitlines() if l.startswith("jit_args ")]
    assert len(answers) == 1, proc.stdout
    got = json.loads(answers[0])
    assert got == [[p, kinds[k], t, bool(v), c, ct, cp] for p, k, t, v, c, ct, cp in EXPECTED]


@pytest.mark.parametrize("name", ["with_proteus", "without_proteus"])
def test_kir_trace_shows_the_runtime_constants(programs, name):
    """Issue 23: the trace showed nothing of the runtime constants the hook captured from
    the Proteus ABI. Its register-kernel line now lists them (the pass describes them just
    after the runtime registered the kernel: the line waits for them), and each launch
    marks the arguments that are runtime constants."""
    import json

    from jsonschema import validate
    d, fatbin = programs
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "LD_LIBRARY_PATH": str(d)}
    text = subprocess.run([d / name, fatbin, "launch"], capture_output=True, text=True, timeout=60,
                          env={**env, "KIR_TRACE": "text"})
    assert text.returncode == 0, text.stderr
    kernels = [l for l in text.stderr.splitlines() if l.startswith("kir-trace register-kernel")]
    assert len(kernels) == 1 and "register-jit-args" not in text.stderr
    assert kernels[0].endswith(" jit=[1:scalar:f32,2:array:f64[4]:by-value,3:array:i32[@4],"
                               "5:object(24 bytes):by-value,7:scalar:bool]"), kernels[0]
    launches = [l for l in text.stderr.splitlines() if l.startswith("kir-trace launch")]
    assert len(launches) == 1 and " args=[jit:2.5,jit:0x0,jit:0x0,64] " in launches[0], launches
    as_json = subprocess.run([d / name, fatbin, "launch"], capture_output=True, text=True, timeout=60,
                             env={**env, "KIR_TRACE": "json"})
    events = [json.loads(l) for l in as_json.stderr.splitlines() if l.startswith("{")]
    schema = json.loads((Path(__file__).parents[2] / "docs" / "schemas" / "trace.schema.json").read_text())
    for event in events:
        validate(event, schema)
    [kernel] = [e for e in events if e["event"] == "register-kernel"]
    assert kernel["jit"] == [
        {"position": 1, "kind": "scalar", "type": "f32"},
        {"position": 2, "kind": "array", "type": "f64", "by_value": True, "count": 4, "count_position": 0},
        {"position": 3, "kind": "array", "type": "i32", "by_value": False, "count": 0, "count_position": 4},
        {"position": 5, "kind": "object", "type": "bytes", "by_value": True, "count": 24, "count_position": 0},
        {"position": 7, "kind": "scalar", "type": "bool"}]
    [launch] = [e for e in events if e["event"] == "launch"]
    assert launch["jit"] == [1, 2, 3] and launch["values"] == ["2.5", "0x0", "0x0", "64"]
