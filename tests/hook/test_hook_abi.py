"""The hook API across versions (issue 22, docs/abi.md "hooks.h"): the ctypes
mirrors of python/kir/hook.py agree with the C compiler's layouts of kir/hooks.h;
a client built against the API-5 header (kept as tests/fixtures/hook_api5)
runs on this layer and sees what a client built against the current header
sees; a client built for a newer API than the layer's is refused (one line, a
counted failure), and a current client reads the appended `struct_size` fields
only after asking kir_hook_api_version(). Without a GPU: the stub runtime,
driver and app of tests/support/stub_cuda.py."""
from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import pytest

import kir
from build import source  # tests/support/build.py: a source under tests/fixtures
from kir import hook
from stub_cuda import AXPY, HOOK, INCLUDE, rig  # noqa: F401  (the stub runtime, driver and app)

API5 = Path(__file__).parents[1] / "fixtures" / "hook_api5"

# The ctypes mirror of each C struct python/kir/hook.py reads.
MIRRORS = {"kir_hook_kernel": hook._Kernel, "kir_hook_global": hook._Global, "kir_hook_allocation": hook._Allocation,
           "kir_hook_stats": hook._Stats, "kir_jit_arg": hook._JitArg,
           "kir_hook_substitute": hook._Substitute, "kir_jit_capture": hook._Capture}


def test_ctypes_mirrors_match_the_c_layouts(tmp_path):
    lines = [f'printf("{c} sizeof %zu\\n", sizeof({c}));' for c in MIRRORS]
    lines += [f'printf("{c} {f} %zu\\n", offsetof({c}, {f}));' for c, m in MIRRORS.items() for f, _ in m._fields_]
    (tmp_path / "layout.c").write_text("#include <stddef.h>\n#include <stdio.h>\n#include \"kir/hooks.h\"\n"
                                       "int main(void) {\n" + "\n".join(lines) + "\nreturn 0;\n}\n")
    subprocess.run(["gcc", "-Wall", "-Werror", f"-I{INCLUDE}", "layout.c", "-o", "layout"], check=True, cwd=tmp_path)
    c = {}
    for line in subprocess.run([tmp_path / "layout"], capture_output=True, text=True, check=True).stdout.splitlines():
        struct, field, value = line.split()
        c[struct, field] = int(value)
    python = {}
    for struct, mirror in MIRRORS.items():
        python[struct, "sizeof"] = ctypes.sizeof(mirror)
        python.update({(struct, f): getattr(mirror, f).offset for f, _ in mirror._fields_})
    assert python == c
    assert len(c) > 40


def test_the_header_and_the_layer_agree_on_the_api():
    header = (INCLUDE / "kir" / "hooks.h").read_text()
    assert int(re.search(r"#define KIR_HOOK_API_VERSION (\d+)", header).group(1)) == kir.hook_api_version
    old = (API5 / "kir" / "hooks.h").read_text()
    assert int(re.search(r"#define KIR_HOOK_API_VERSION (\d+)", old).group(1)) == 5 < kir.hook_api_version
    layer = ctypes.CDLL(str(HOOK))
    layer.kir_hook_api_version.restype = ctypes.c_uint32
    assert layer.kir_hook_api_version() == kir.hook_api_version


# One client source, built against either header. A current client asks the
# layer's API before it reads a field the layer may lack (struct_size, API 6).
CLIENT = source("hook/hook_abi_client.c")

VARIANTS = {"old": ([f"-I{API5}"], 0), "new": ([], 0), "ahead": ([], 1), "probe": (["-DPROBE"], 0)}


@pytest.fixture(scope="module")
def clients(rig):  # noqa: F811
    d = rig[0]
    (d / "abi_client.c").write_text(CLIENT)
    for name, (flags, ahead) in VARIANTS.items():
        subprocess.run(["gcc", "-Wall", "-Werror", "-shared", "-fPIC", *flags, f"-I{INCLUDE}", f'-DNAME="{name}"',
                        f"-DAHEAD={ahead}", "abi_client.c", "-o", f"libabi_{name}.so", "-ldl"], check=True, cwd=d)
    return d


def run(rig, names, log=False):  # noqa: F811
    d, fatbin, cubin = rig
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": ":".join(str(d / f"libabi_{n}.so") for n in names)}
    if log:
        env["KIR_HOOK_LOG"] = "1"
    proc = subprocess.run([d / "app", fatbin, cubin, "rd"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def said(proc, name):
    return [line.split(" ", 1)[1] for line in proc.stdout.splitlines() if line.startswith(name + " ")]


def test_an_api5_client_runs_on_this_layer(rig, clients):  # noqa: F811
    proc = run(rig, ["old", "new"])
    old, new = said(proc, "old"), said(proc, "new")
    assert any(line.startswith("kernel " + AXPY) for line in old)
    begins = [line for line in old if line.startswith("begin ")]
    assert len(begins) == 2 and all(f"kernel={AXPY}" in b and "identity=" + "0" * 32 not in b for b in begins)
    # The old client sees every event and field a current client sees (the prefix it knows) ...
    assert old == [line for line in new if not line.startswith("sizes ")]
    # ... and the current one reads the appended sizes, those of the layer's structs.
    sizes = {line for line in new if line.startswith("sizes ")}
    # kir_hook_launch: 128 bytes through API 6's struct_size; API 7 appended device, arch, context;
    # API 11 vendor (152 bytes).
    launch, kernel = ctypes.sizeof(ctypes.c_void_p) * 19, ctypes.sizeof(hook._Kernel)
    assert sizes == {f"sizes launch={launch}/{launch} kernel={kernel}/{kernel}"}


def test_a_client_newer_than_the_layer_is_refused(rig, clients):  # noqa: F811
    proc = run(rig, ["ahead", "probe"])
    assert said(proc, "ahead") == []  # never called
    api = kir.hook_api_version
    why = (f"built for hook API {api + 1}, newer than this layer's {api}: "
           "not added (use a kir at least as new as the client)")
    refused = [line for line in proc.stderr.splitlines() if line.startswith("kir-hook: error:")]
    # The library from KIR_HOOK_CLIENTS: one line (without KIR_HOOK_LOG), then one per
    # kir_hook_add_client of a newer struct, which returns -1 and is counted.
    probes = [line for line in said(proc, "probe") if line.startswith("add_client=")]
    assert refused == [f"kir-hook: error: client {clients / 'libabi_ahead.so'}: {why}"] + \
        [f"kir-hook: error: kir_hook_add_client: {why}"] * len(probes)
    assert len(probes) == 2
    counts = [tuple(map(int, re.fullmatch(r"add_client=-1 failures=(\d+)->(\d+)", p).groups())) for p in probes]
    assert counts[0][0] == 1 and all(after == before + 1 for before, after in counts)  # the library's refusal, then each
    assert counts[1][0] == counts[0][1]
