"""Running a build step or a built program (its output shown on failure), and what the
downstream CMake project (tests/packaging/downstream) must print for an app."""
from __future__ import annotations

import subprocess


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def downstream_expected(app) -> list[str]:
    """What tests/packaging/downstream's program prints for `app`, from kir's Python API: a line
    per image, a line per kernel of each cubin and PTX image (the oracle of the
    downstream tests here and in tests/packaging/test_wheel.py)."""
    import kir
    expected = []
    for image in kir.open(app).images:
        expected.append(f"image {image.index} {image.entry.kind} {image.arch} {image.size}")
        if image.kind in ("cubin", "ptx"):
            expected += [f"kernel {image.index} {k.name} {len(k.params)} {k.param_bytes}" for k in image.kernels]
    return expected
