"""The checked-in type stub of the bindings matches what nanobind generates from
the built module (nanobind's own practice)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kir

STUB = Path(__file__).resolve().parents[2] / "python" / "kir" / "_core.pyi"


def test_core_stub_is_current(tmp_path):
    generated = tmp_path / "_core.pyi"
    subprocess.run([sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "kir._core", "-o",
                    str(generated)], check=True, capture_output=True)
    assert generated.read_text() == STUB.read_text(), (
        "python/kir/_core.pyi is stale: regenerate it with\n"
        f"  python -m nanobind.stubgen -m kir._core -o {STUB}")


def test_package_is_typed():
    assert (Path(kir.__file__).parent / "py.typed").exists()
    assert (Path(kir.__file__).parent / "_core.pyi").exists()
