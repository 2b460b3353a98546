"""`kir inspect --sass`: each cubin's kernels as SASS (issue 26), checked against
cuobjdump -sass of the same binary: the same instructions at the same offsets, per
architecture and kernel."""
from __future__ import annotations

import re
import subprocess

import pytest

import kir

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+([^;]*?)\s*;")
ARCH = re.compile(r"arch = (sm_\d+)")
FUNCTION = re.compile(r"Function : (\S+)")
#: Branches: nvdisasm names their targets (`(.L_x_0)), cuobjdump gives the address.
BRANCHES = {"BRA", "BSSY", "CALL", "BRX", "JMP", "SSY", "PBK", "CAL", "JCAL", "PCNT", "BREAK"}


def normalized(instruction: str) -> str:
    instruction = re.sub(r"`\(\.L_x_\d+\)", "LABEL", " ".join(instruction.split()))
    m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_.]+)", instruction)
    if m and m[2].split(".")[0] in BRANCHES:
        instruction = re.sub(r"0x[0-9a-f]+$", "LABEL", instruction)
    return instruction


def cuobjdump_sass(cuobjdump: str, path) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """{(arch, kernel): [(offset, instruction)]} as cuobjdump -sass prints them."""
    text = subprocess.run([cuobjdump, "-sass", str(path)], capture_output=True, text=True, check=True).stdout
    out, arch, kernel = {}, None, None
    for line in text.splitlines():
        if m := ARCH.search(line):
            arch = m[1]
        elif m := FUNCTION.search(line):
            kernel = m[1]
            out[(arch, kernel)] = []
        elif kernel and (m := INSTRUCTION.search(line)):
            out[(arch, kernel)].append((m[1], normalized(m[2])))
    return out


def kir_sass(text: str) -> dict[tuple[str, str], list[tuple[str, str]]]:
    out, key = {}, None
    for line in text.splitlines():
        if line.startswith("-- sass: "):
            *_, arch, kernel = line.split()
            key = (arch, kernel)
            out[key] = []
        elif key and (m := INSTRUCTION.search(line)):
            out[key].append((m[1], normalized(m[2])))
    return out


def test_sass_matches_cuobjdump(built, kir_cli, cuobjdump):
    app = built["app"]
    result = kir_cli("inspect", "--sass", app)
    assert result.returncode == 0, result.stderr
    ours, theirs = kir_sass(result.stdout), cuobjdump_sass(cuobjdump, app)
    cubins = [i for i in kir.open(app).images if i.kind == "cubin"]
    assert len(ours) == sum(len(i.kernels) for i in cubins) and ours
    for key, instructions in ours.items():
        assert instructions and instructions == theirs[key], key


def test_sass_of_one_kernel(built, kir_cli, cuobjdump):
    result = kir_cli("inspect", "--sass", "--kernel", "scale<float>", built["app"])
    assert result.returncode == 0, result.stderr
    ours = kir_sass(result.stdout)
    assert ours and {k for _, k in ours} == {"_Z5scaleIfEvPT_S0_6Params"}
    assert {a for a, _ in ours} == {i.arch for i in kir.open(built["app"]).images if i.kind == "cubin"}


@pytest.mark.parametrize("args, message", [(["--sass", "--json"], "--sass prints text: not with --json")])
def test_sass_option_errors(built, kir_cli, args, message):
    result = kir_cli("inspect", *args, built["app"])
    assert result.returncode == 2 and message in result.stderr
