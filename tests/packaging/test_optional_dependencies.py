"""A missing optional dependency is a KirError naming the extra that installs it:
`pip install 'DIST[EXTRA]'`, DIST the installed distribution's name (read here
independently: the distribution whose RECORD lists kir/__init__.py). Each case runs
in a fresh interpreter where the module is made unimportable (sys.modules[name] =
None, as Python does for a module known to be absent)."""
from __future__ import annotations

import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from replay_records import make_record

TESTS = Path(__file__).resolve().parents[1] / "support"  # the rigs a child imports


def installed_distribution() -> str:
    for dist in metadata.distributions():
        if any(str(f).replace("\\", "/") == "kir/__init__.py" for f in dist.files or ()):
            return dist.metadata["Name"]
    return "kir"


DIST = installed_distribution()


def without(modules: list[str], code: str) -> subprocess.CompletedProcess:
    probe = "import sys\n" + "".join(f"sys.modules[{m!r}] = None\n" for m in modules) + code
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"})


def raises(modules: list[str], call: str) -> str:
    """The KirError message `call` raises without `modules` (its class name first)."""
    result = without(modules, f"from kir.errors import KirError\ntry:\n    {call}\n"
                              "except KirError as e:\n    print(type(e).__name__, e)\nelse:\n    print('no error')\n")
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


CASES = [
    (["optuna"], "from kir.tune.study import _optuna; _optuna()", "KirError kir tune: optuna", "tune"),
    (["distributed", "dask"], "from kir.distribute import _import_distributed; _import_distributed()",
     "DistributedError --workers and --scheduler: Dask (distributed)", "distributed"),
    (["cuda", "cuda.bindings"], "from kir.replay.replayer import _driver; _driver()",
     "NoDeviceError replaying on the GPU: cuda-bindings", "replay"),
    (["numpy"], "from kir.replay.comparison import Tolerance, _norms; _norms(b'1234', b'1234', Tolerance(atol=1))",
     "ReplayError comparing with a tolerance: numpy", "replay"),
    (["cuda.bindings.nvjitlink"], "from kir.jit.codegen import nvjitlink; nvjitlink('', 'sm_90', [])",
     "KirError assembling with nvJitLink (else use ptxas): cuda-bindings' nvjitlink", "jit"),
    (["cupti"], "from kir.replay.activity import cupti; cupti()", "KirError timing 'activity': cupti-python",
     "timing"),
    (["llvmlite"], "import kir.jit; kir.jit.compile(b'BC', 'k', 'sm_90')",
     "KirError reading or compiling LLVM IR (kir inspect --ir, kir.ir, kir.jit, kir replay --code ir, kir tune): "
     "llvmlite", "ir"),
]


@pytest.mark.parametrize("modules, call, start, extra", CASES, ids=[c[3] + ":" + c[0][0] for c in CASES])
def test_the_message_names_the_extra(modules, call, start, extra):
    message = raises(modules, call)
    assert message.startswith(f"{start} is not installed: pip install '{DIST}[{extra}]'"), message


def test_extras_exist_in_the_metadata():
    """Every extra a message names is one the distribution declares."""
    declared = set(metadata.metadata(DIST).get_all("Provides-Extra") or [])
    assert {c[3] for c in CASES} <= declared, declared


def test_what_needs_no_llvm_runs_without_llvmlite_and_ir_says_the_extra(built):
    """llvmlite is the `ir` extra (issue 26): inspect, hash, extract and diff run without it;
    `kir inspect --ir` says which extra installs it and exits 2."""
    app = str(built["jit_app"])
    for verb in (["inspect", "--kernels"], ["hash"], ["diff"]):
        args = [*verb, app] + ([app] if verb == ["diff"] else [])
        result = without(["llvmlite", "llvmlite.binding"], f"from kir.cli import main\nsys.exit(main({args!r}))\n")
        assert result.returncode == 0, (verb, result.stderr)
    result = without(["llvmlite", "llvmlite.binding"],
                     f"from kir.cli import main\nsys.exit(main(['inspect', '--ir', {app!r}]))\n")
    assert result.returncode == 2 and "llvmlite is not installed: pip install" in result.stderr, result.stderr
    assert f"'{DIST}[ir]'" in result.stderr and "Traceback" not in result.stderr


def test_the_metadata_publishes_no_test_extra_and_requires_no_llvmlite():
    meta = metadata.metadata(DIST)
    extras = set(meta.get_all("Provides-Extra") or [])
    assert "test" not in extras and {"ir", "jit", "tune", "cu12", "cu13"} <= extras
    required = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert not any(r.startswith("llvmlite") for r in required), required
    for extra in ("ir", "jit", "tune"):  # each reaches llvmlite (jit and tune through ir)
        wanted = [r for r in meta.get_all("Requires-Dist") if f'extra == "{extra}"' in r]
        assert any(r.startswith("llvmlite") or "[ir]" in r for r in wanted), (extra, wanted)
    assert meta["Author"] == "The kir developers"
    assert "Programming Language :: Python :: 3.10" in meta.get_all("Classifier")


def test_the_docs_and_schemas_are_installed():
    import kir
    docs = Path(kir.docs_dir())
    assert (docs / "json-schema.md").is_file()
    schemas = sorted(p.name for p in (docs / "schemas").glob("*.schema.json"))
    assert "inspect.schema.json" in schemas and len(schemas) >= 10
    # Every page, not the documentation site's own sources (docs/conf.py, index.md, site/:
    # tests/packaging/test_docs_site.py builds them from the checkout).
    root = Path(__file__).resolve().parents[2] / "docs"
    pages = {p.name for p in root.glob("*.md")} - {"index.md"}
    assert pages <= {p.name for p in docs.glob("*.md")}, pages - {p.name for p in docs.glob("*.md")}
    assert not [p for p in ("conf.py", "index.md", "site", "_build") if (docs / p).exists()]


def test_the_cli_says_it_and_exits_2(built, tmp_path):
    """`kir replay RECORD` without cuda-bindings: one line naming the extra, exit 2."""
    record = make_record(tmp_path / "rec", built["kernels_sm90.cubin"], "_Z4axpyfPKfPfi")
    result = without(["cuda", "cuda.bindings"],
                     f"from kir.cli import main\nsys.exit(main(['replay', {str(record.path)!r}]))\n")
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"kir: error: replaying on the GPU: cuda-bindings is not installed: "
                             f"pip install '{DIST}[replay]' (import of cuda.bindings halted; None in sys.modules)\n")


def test_the_distribution_name_falls_back_to_kir(monkeypatch):
    """Run from a source tree (no installed metadata names the package): the name
    pyproject.toml gives the distribution (errors.DISTRIBUTION)."""
    from kir import errors
    monkeypatch.setattr(metadata, "packages_distributions", lambda: {})
    assert errors.install_hint("replay") == f"pip install '{errors.DISTRIBUTION}[replay]'"
    import re
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.search(r'^name = "([^"]+)"', pyproject, re.M)[1] == errors.DISTRIBUTION
