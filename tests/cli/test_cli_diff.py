"""`kir diff A B` on two nvcc builds of tests/fixtures/cli_apps/diff_kernels.cu (the
second with -DVARIANT: one kernel's body changed, one's parameters changed, one
removed, one added, one the same). Oracles: cuobjdump -res-usage (registers,
shared memory per kernel and architecture) and cuobjdump -sass (whether a
kernel's own code changed); the parameter layouts are the C ABI's for the
signatures in the source."""
from __future__ import annotations

import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

APPS = Path(__file__).resolve().parents[1] / "fixtures" / "cli_apps"
ARCHS = ["-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("diff")
    a, b = out / "a.o", out / "b.o"

    def build(target: Path, *defines: str) -> None:
        subprocess.run(["nvcc", "-c", *ARCHS, *defines, str(APPS / "diff_kernels.cu"), "-o", str(target)],
                       check=True, capture_output=True)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda job: build(*job), [(a,), (b, "-DVARIANT")]))
    return a, b


def res_usage(cuobjdump, path) -> dict[tuple[str, str], tuple[int, int]]:
    """{(arch, mangled name): (registers, shared bytes)} as cuobjdump -res-usage prints them."""
    text = subprocess.run([cuobjdump, "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    out, arch, function = {}, None, None
    for line in text.splitlines():
        if m := re.match(r"arch = (sm_\d+)", line):
            arch = m.group(1)
        elif m := re.match(r"\s*Function (\S+):", line):
            function = m.group(1)
        elif (m := re.search(r"REG:(\d+) .*SHARED:(\d+)", line)) and function:
            out[(arch, function)] = (int(m.group(1)), int(m.group(2)))
            function = None
    return out


def sass(cuobjdump, path, arch: str, function: str) -> str:
    """The kernel's SASS as cuobjdump prints it (addresses included, header lines dropped)."""
    text = subprocess.run([cuobjdump, "-sass", "-arch", arch, "-fun", function, str(path)],
                          capture_output=True, text=True, check=True).stdout
    return "\n".join(l for l in text.splitlines() if l.strip().startswith("/*"))


def diff(kir_cli, a, b, *args):
    result = kir_cli("diff", "--json", *args, a, b)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_added_removed_changed(builds, kir_cli, cuobjdump):
    a, b = builds
    status, d = diff(kir_cli, a, b)
    assert status == 1 and d["schema"] == "kir.diff/1" and d["errors"] == []
    targets = {("sm_80", "cubin"), ("sm_90", "cubin"), ("sm_90", "ptx")}
    assert {(k["target"], k["image_kind"], k["kernel"]) for k in d["added"]} == \
        {(t, kind, "_Z5addedPi") for t, kind in targets}
    assert {(k["target"], k["image_kind"], k["kernel"]) for k in d["removed"]} == \
        {(t, kind, "_Z7removedPi") for t, kind in targets}
    changed = {(k["target"], k["image_kind"], k["kernel"]): k for k in d["changed"]}
    # The static hash covers the whole image: every kernel of the unit changed it.
    assert set(changed) == {(t, kind, name) for t, kind in targets
                            for name in ("_Z4bodyPfi", "_Z4samePfi", "_Z6paramsPfxd")}
    usage_a, usage_b = res_usage(cuobjdump, a), res_usage(cuobjdump, b)
    for (target, kind, name), k in changed.items():
        before, after = k["before"], k["after"]
        assert before["static"] != after["static"] and "static" in k["changes"]
        if kind == "cubin":  # registers and shared memory as cuobjdump reads them
            assert (before["registers"], before["shared_bytes"]) == usage_a[(target, before["kernel"])]
            assert (after["registers"], after["shared_bytes"]) == usage_b[(target, after["kernel"])]
            assert ("registers" in k["changes"]) == (before["registers"] != after["registers"])
            assert ("shared_bytes" in k["changes"]) == (before["shared_bytes"] != after["shared_bytes"])
            same_sass = sass(cuobjdump, a, target, before["kernel"]) == sass(cuobjdump, b, target, after["kernel"])
            assert ("code" in k["changes"]) == (not same_sass), (target, name)
    # the body change: shared memory from the tile, on every cubin
    for target in ("sm_80", "sm_90"):
        body = changed[(target, "cubin", "_Z4bodyPfi")]
        assert body["before"]["shared_bytes"] == 0 and body["after"]["shared_bytes"] > 0
        assert "code" in body["changes"]
        assert "code" not in changed[(target, "cubin", "_Z4samePfi")]["changes"]
    # the signature change: matched by its demangled name, renamed, its layout the C ABI's
    for target, kind in targets:
        params = changed[(target, kind, "_Z6paramsPfxd")]
        assert params["before"]["kernel"] == "_Z6paramsPfi" and params["changes"][0] == "renamed"
        assert [(p["offset"], p["size"]) for p in params["before"]["params"]] == [(0, 8), (8, 4)]
        assert [(p["offset"], p["size"]) for p in params["after"]["params"]] == [(0, 8), (8, 8), (16, 8)]
        assert "params" in params["changes"]


def test_text_output(builds, kir_cli):
    a, b = builds
    result = kir_cli("diff", "--arch", "sm_90", a, b)
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"--- {a}", f"+++ {b}"]
    assert "- sm_90      cubin        removed(int*)" in result.stdout
    assert "+ sm_90      cubin        added(int*)" in result.stdout
    body = next(l for l in lines if l.startswith("~ sm_90      cubin        body("))
    assert "code changed" in body and "shared 0 -> " in body
    same = next(l for l in lines if l.startswith("~ sm_90      cubin        same("))
    assert "(its own code unchanged)" in same
    params = next(l for l in lines if l.startswith("~ sm_90      cubin        params("))
    assert "name _Z6paramsPfi -> _Z6paramsPfxd" in params and "params [0:8 8:4] -> [0:8 8:8 16:8]" in params
    assert lines[-1] == "kir: 2 added, 2 removed, 6 changed, 0 unchanged"  # sm_90: cubin and PTX
    assert "sm_80" not in result.stdout


def test_same_binary_no_difference(builds, kir_cli):
    a, _ = builds
    status, d = diff(kir_cli, a, a, "--kernel", "same|body")
    assert status == 0 and d["added"] == d["removed"] == d["changed"] == []
    assert {k["kernel"] for k in d["unchanged"]} == {"_Z4samePfi", "_Z4bodyPfi"}


def test_bad_input(builds, kir_cli, tmp_path):
    a, _ = builds
    (tmp_path / "t").write_text("x")
    result = kir_cli("diff", a, tmp_path / "t")
    assert result.returncode == 2 and "not an ELF file" in result.stderr and "Traceback" not in result.stderr
    assert kir_cli("diff", a).returncode == 2
    assert kir_cli("diff", "--arch", "hopper", a, a).returncode == 2
