"""The documentation site (docs/conf.py, CONTRIBUTING.md): Sphinx builds the pages of
docs/, the README as the landing page and the API reference from the installed kir's
docstrings with warnings as errors (-W) and every cross-reference checked (-n), as CI
does; then the pages and the objects a user looks for are there."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from native_build import run

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = run(sys.executable, "-m", "sphinx", "-W", "--keep-going", "-n", "-E", "-q", "-b", "html",
               "-d", out / "doctrees", ROOT / "docs", out / "html", cwd=ROOT)
    assert "WARNING" not in proc.stderr and "ERROR" not in proc.stderr, proc.stderr[-3000:]
    return out / "html"


def ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text()))


def test_the_pages_are_there(site):
    """The README is the landing page, each page of docs/ is a page of the site, and the
    project's CONTRIBUTING and CHANGELOG are reachable."""
    index = (site / "index.html").read_text()
    assert (ROOT / "README.md").read_text().splitlines()[0].removeprefix("# ") in index
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "index.md":
            assert (site / page.with_suffix(".html").name).is_file(), page.name
            assert f'href="{page.stem}.html"' in index, page.name
    assert "Versioning policy" in (site / "site" / "changelog.html").read_text()
    assert "Adding a verb" in (site / "site" / "contributing.html").read_text()


def test_the_api_reference_documents_the_public_calls(site):
    """The API pages hold the objects the README and the docs call, from their docstrings:
    Python modules and the compiled kir._core."""
    api = site / "site" / "api"
    binary = ids(api / "binary.html")
    assert {"kir.binary.kernel_static_hash", "kir.binary.open", "kir.binary.Binary.load_code",
            "kir.binary.Image.static_hash"} <= binary
    assert {"kir.hashing.kernel_hashes", "kir.hashing.jit_key"} <= ids(api / "hashing.html")
    assert {"kir.record.Record.load"} <= ids(api / "record.html")
    assert {"kir.replay.Replayer", "kir.replay.plan"} <= ids(api / "replay.html")
    assert {"kir.jit.compile", "kir.jit.store"} <= ids(api / "jit.html")
    assert {"kir.tune.tune", "kir.tune.Space"} <= ids(api / "tune.html")
    assert {"kir.cache.Cache"} <= ids(api / "cache.html")
    assert {"kir.docs_dir", "kir.cmake_dir", "kir.c_abi_version", "kir.hook_api_version"} <= ids(api / "kir.html")
    assert {"kir.hook.Kernel.static_hash", "kir.jit.clients.declare"} <= ids(api / "hook.html") | ids(api / "jit.html")
    core = ids(api / "core.html")
    assert {"kir._core.Hash128", "kir._core.DeviceCode", "kir._core.demangle", "kir._core.static_hash"} <= core
    # The docstring itself, not only the name.
    assert "under libkir" in (api / "binary.html").read_text()
