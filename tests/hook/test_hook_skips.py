"""Hook API 5: kir_hook_client.launch_skips — the layer computes a launch event's
launch identity (a hash over every argument) and looks its kernel up only when
some client reads them (issue 15: nothing runs that the clients present do not
need). Without a GPU: the stub runtime and driver of tests/support/stub_cuda.py,
clients written here that print what their launch events carry; an API 4 client
(a struct that stops before launch_skips) still gets everything."""
from __future__ import annotations

import subprocess

import pytest

from build import source  # tests/support/build.py: a source under tests/fixtures
from stub_cuda import AXPY, HOOK, INCLUDE, rig  # noqa: F401  (the stub runtime, driver and app)

CLIENT = source("hook/hook_skips_client.c")

VARIANTS = {"none": ("0", 0), "identity": ("KIR_HOOK_SKIP_IDENTITY", 0), "kernel": ("KIR_HOOK_SKIP_KERNEL", 0),
            "old": ("0", 1)}


@pytest.fixture(scope="module")
def clients(rig):  # noqa: F811
    d = rig[0]
    (d / "skips.c").write_text(CLIENT)
    for name, (skips, api4) in VARIANTS.items():
        subprocess.run(["gcc", "-Wall", "-shared", "-fPIC", f"-I{INCLUDE}", f'-DNAME="{name}"', f"-DSKIPS={skips}",
                        f"-DAPI4={api4}", "skips.c", "-o", f"libskip_{name}.so"], check=True, cwd=d)
    return d


def seen(rig, clients, names):  # noqa: F811
    d, fatbin, cubin = rig
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": str(HOOK), "LD_LIBRARY_PATH": str(d),
           "KIR_HOOK_CLIENTS": ":".join(str(d / f"libskip_{n}.so") for n in names)}
    proc = subprocess.run([d / "app", fatbin, cubin, "r"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[1] == "begin":
            out[parts[0]] = (parts[3].removeprefix("kernel="), parts[4].removeprefix("identity="))
    return out


ZERO = "0" * 32


def test_what_a_client_skips_is_not_computed(rig, clients):  # noqa: F811
    alone = {n: seen(rig, clients, [n])[n] for n in VARIANTS}
    assert alone["kernel"] == ("-", ZERO)           # neither looked up nor hashed
    assert alone["identity"] == (AXPY, ZERO)        # looked up, not hashed
    for name in ("none", "old"):                    # everything, as before API 5
        assert alone[name][0] == AXPY and alone[name][1] != ZERO
    assert alone["none"] == alone["old"]


def test_the_layer_computes_what_any_client_needs(rig, clients):  # noqa: F811
    both = seen(rig, clients, ["kernel", "old"])
    assert both["kernel"] == both["old"] and both["old"][0] == AXPY and both["old"][1] != ZERO
    mixed = seen(rig, clients, ["kernel", "identity"])
    assert mixed["kernel"] == mixed["identity"] == (AXPY, ZERO)
