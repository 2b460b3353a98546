"""Every Python block of the README and of docs/ runs (issue 26: the README's block raised
NameError). Each block runs alone, in a fresh interpreter, in a folder holding what the
docs name: `app` (the Proteus-built CUDA app of the fixtures, `jit_app`, whose daxpy
carries its IR) and `daxpy.bc` (that IR). Blocks marked `<!-- docs-code: gpu ... -->`
replay or tune records: they run where a GPU is, after `kir record` of `app` into `rec/`,
and skip elsewhere, saying so."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kir.app import gpu_driver_problem

ROOT = Path(__file__).resolve().parents[2]
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(?P<mark><!-- docs-code: (?P<kind>\w+)[^\n]*-->\n)?```python\n(?P<code>.*?)```", re.S)


def blocks() -> list:
    out = []
    for path in FILES:
        text = path.read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            out.append(pytest.param(m["code"], m["kind"] or "cpu", id=f"{path.name}:{line}"))
    return out


def test_the_docs_have_python_blocks():
    found = blocks()
    assert len(found) >= 7 and {p.id.split(":")[0] for p in found} >= {"README.md", "jit.md", "tune.md", "recording.md"}


@pytest.fixture(scope="module")
def folder(built, tmp_path_factory):
    here = tmp_path_factory.mktemp("docs-code")
    shutil.copy(built["jit_app"], here / "app")
    import kir
    from kir import ir
    [module] = [m for m in ir.ir_modules(kir.open(here / "app")) if "_Z5daxpydPKdPdi" in [k.name for k in m.kernels]]
    (here / "daxpy.bc").write_bytes(module.bitcode)
    return here


@pytest.fixture(scope="module")
def recorded(folder):
    """`rec/`: the app's launches recorded, once (on a GPU only)."""
    problem = gpu_driver_problem()
    if problem is not None:
        pytest.skip(f"a block that replays or tunes records needs a GPU ({problem})")
    subprocess.run([sys.executable, "-m", "kir", "record", "-o", "rec", "--", "./app", "20", "2.5", "4096"],
                   cwd=folder, check=True, capture_output=True, timeout=300)
    return folder


@pytest.mark.parametrize("code, kind", blocks())
def test_a_python_block_runs(code, kind, folder, request):
    where = request.getfixturevalue("recorded") if kind == "gpu" else folder
    run = subprocess.run([sys.executable, "-c", code], cwd=where, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
