"""What a user installs (docs/install.md): the distribution's name and metadata,
the install hints kir prints, the LICENSE, and the libraries against their
headers — every C function a public header declares is exported by the
library that ships it, every out-of-line C++ function one declares is defined
in libkir.a — and the CMake package's exported targets (no xxhash, no paths
of the build machine)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

import kir

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTION = "kir-kernel-ir"
PACKAGE = Path(kir.__file__).resolve().parent
LIBDIR = PACKAGE / "lib"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def pyproject() -> dict:
    if tomllib is None:
        pytest.skip("tomllib needs Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_distribution_name_is_the_chosen_one():
    """pyproject and the installed metadata say kir-kernel-ir (the name `kir` on
    PyPI is an unrelated project); the import package it installs is `kir`."""
    assert pyproject()["project"]["name"] == DISTRIBUTION
    assert metadata.metadata(DISTRIBUTION)["Name"] == DISTRIBUTION
    assert DISTRIBUTION in metadata.packages_distributions()["kir"]
    assert metadata.version(DISTRIBUTION) == kir.__version__
    scripts = {e.name: e.value for e in metadata.distribution(DISTRIBUTION).entry_points
               if e.group == "console_scripts"}
    assert scripts == {"kir": "kir.cli:main"}


HINT = re.compile(r"pip install '([A-Za-z0-9._-]+)\[([A-Za-z0-9_,-]+)\]'")
WRONG = re.compile(r"pip install '?kir(?:\[|'|\s|$)")


def hint_sources() -> list[Path]:
    return (sorted((ROOT / "python" / "kir").rglob("*.py")) + [ROOT / "README.md"]
            + sorted((ROOT / "docs").rglob("*.md")))


def test_every_install_hint_names_this_distribution_and_an_existing_extra():
    """Every "pip install '<dist>[<extra>]'" that kir prints or the docs give names
    this distribution and an extra that pyproject (and so the installed
    metadata) defines; none names the taken `kir`."""
    extras = set(pyproject()["project"]["optional-dependencies"])
    assert extras == set(metadata.metadata(DISTRIBUTION).get_all("Provides-Extra"))
    hints = []
    for path in hint_sources():
        text = path.read_text()
        assert not WRONG.search(text), f"{path}: {WRONG.search(text).group(0)!r} installs the unrelated PyPI `kir`"
        for match in HINT.finditer(text):
            hints.append((path.relative_to(ROOT), match.group(1), match.group(2)))
    # kir's messages build their hint at run time (kir.errors.missing_extra: the name
    # the installed metadata gives; tests/packaging/test_optional_dependencies.py triggers each)
    from kir.errors import DISTRIBUTION as FALLBACK, install_hint
    assert FALLBACK == DISTRIBUTION
    for extra in ("distributed", "replay", "jit", "tune", "timing"):
        assert install_hint(extra) == f"pip install '{DISTRIBUTION}[{extra}]'"
    for path, dist, extra in hints:
        assert dist == DISTRIBUTION, f"{path}: pip install '{dist}[{extra}]'"
        assert set(extra.split(",")) <= extras, f"{path}: extra {extra!r} is not in pyproject ({sorted(extras)})"


def test_license_file_is_apache_2_and_installed():
    text = (ROOT / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    meta = metadata.metadata(DISTRIBUTION)
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    files = [f for f in metadata.distribution(DISTRIBUTION).files if f.name == "LICENSE"]
    assert len(files) == 1 and files[0].read_text() == text


# ---- headers against libraries --------------------------------------------------

def c_declarations(header: Path) -> list[str]:
    """The functions a C header declares at file scope (comments, preprocessor
    lines and struct/enum/union bodies removed; typedefs skipped)."""
    text = re.sub(r"/\*.*?\*/", " ", header.read_text(), flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", " ", text, flags=re.M)
    text = text.replace('extern "C" {', " ")
    text = re.sub(r"__attribute__\s*\(\([^()]*\)\)", " ", text)  # record.h's weak declaration
    while True:
        stripped = re.sub(r"\{[^{}]*\}", " ", text)
        if stripped == text:
            break
        text = stripped
    names = []
    for statement in text.split(";"):
        statement = " ".join(statement.split())
        if not statement or statement.split()[0] in ("typedef", "enum", "struct", "union", "static"):
            continue  # `static inline` helpers are defined in the header (their bodies removed above)
        match = re.match(r"^[\w\s*]*?\b(\w+)\s*\(", statement)
        if match:
            names.append(match.group(1))
    return names


def exported_functions(library: Path) -> set[str]:
    """Defined global/weak functions of `library`'s dynamic symbol table (pyelftools)."""
    with open(library, "rb") as f:
        symbols = ELFFile(f).get_section_by_name(".dynsym")
        return {s.name for s in symbols.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_shndx"] != "SHN_UNDEF"
                and s["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")}


C_HEADERS = {"kir.h": "libkir.so", "cache.h": "libkir.so", "hooks.h": "libkir_hook.so", "record.h": "libkir_hook.so"}


def test_every_declared_c_function_is_exported():
    """Each public C header's functions against the shared library that ships them
    (kir.h and cache.h: libkir.so, hooks.h and record.h: libkir_hook.so), and back: each
    exported kir_* function is declared in one of them."""
    include = ROOT / "libkir" / "include" / "kir"
    assert sorted(p.name for p in include.glob("*.h")) == sorted(C_HEADERS)
    declared: dict[str, set[str]] = {}
    for header, library in C_HEADERS.items():
        names = c_declarations(include / header)
        assert len(names) == len(set(names)), f"{header} declares a function twice"
        declared.setdefault(library, set()).update(names)
    assert {"kir_binary_open", "kir_jit_key", "kir_cache_lookup"} <= declared["libkir.so"]
    assert {"kir_hook_add_client", "kir_hook_kernel_at"} <= declared["libkir_hook.so"]
    for library, names in declared.items():
        exported = exported_functions(LIBDIR / library)
        assert not names - exported, f"declared in a header, not defined in {library}: {sorted(names - exported)}"
        public = {n for n in exported if n.startswith("kir_")}
        assert not public - names, f"{library} exports undeclared functions: {sorted(public - names)}"


def clang_declarations(headers: list[Path]) -> dict[str, tuple[str, int]]:
    """Functions and methods the C++ headers declare without defining them there
    (not inline, constexpr, templated, defaulted, deleted or pure), by mangled
    name -> (header, line), from clang's AST of one file including them all."""
    include = ROOT / "libkir" / "include"
    source = "".join(f"#include <{h.relative_to(include)}>\n" for h in headers)
    proc = subprocess.run(["clang++-22", "-x", "c++", "-std=c++17", "-fsyntax-only", f"-I{include}",
                           "-Xclang", "-ast-dump=json", "-Xclang", "-ast-dump-filter=kir", "-"],
                          input=source, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    roots, decoder, text, at = [], json.JSONDecoder(), proc.stdout, 0
    while (at := text.find("{", at)) >= 0:
        node, at = decoder.raw_decode(text, at)
        roots.append(node)
    declared: dict[str, tuple[str, int]] = {}
    defined: set[str] = set()
    functions = ("FunctionDecl", "CXXMethodDecl", "CXXConstructorDecl", "CXXDestructorDecl", "CXXConversionDecl")
    templates = ("FunctionTemplateDecl", "ClassTemplateDecl", "ClassTemplatePartialSpecializationDecl")

    def walk(node: dict, where: dict, in_template: bool) -> None:
        loc = node.get("loc", {})
        loc = loc.get("expansionLoc", loc)
        if "file" in loc:
            where["file"] = loc["file"]
        if "line" in loc:
            where["line"] = loc["line"]
        kind = node.get("kind")
        in_template = in_template or kind in templates
        if kind in functions and not in_template and not node.get("isImplicit") and node.get("mangledName"):
            name = node["mangledName"]
            body = any(c.get("kind") == "CompoundStmt" for c in node.get("inner", []))
            if (body or node.get("inline") or node.get("constexpr") or node.get("explicitlyDefaulted")
                    or node.get("explicitlyDeleted") or node.get("pure")):
                defined.add(name)
            elif str(include) in str(Path(where.get("file", "")).resolve()):
                declared.setdefault(name, (Path(where["file"]).name, where.get("line", 0)))
        for child in node.get("inner", []):
            walk(child, where, in_template)

    for root in roots:
        walk(root, {}, False)
    return {name: at for name, at in declared.items() if name not in defined}


def defined_symbols(*libraries: Path) -> set[str]:
    symbols = set()
    for library in libraries:
        dynamic = ["-D"] if library.suffix == ".so" else []  # an installed .so keeps only .dynsym
        proc = subprocess.run(["nm", *dynamic, "--defined-only", library], capture_output=True, text=True, check=True)
        symbols |= {line.split()[-1] for line in proc.stdout.splitlines() if len(line.split()) == 3}
    return symbols


@pytest.mark.skipif(not shutil.which("clang++-22"), reason="clang++-22 not installed (scripts/install-system-deps.sh --tests)")
def test_every_declared_cpp_function_is_defined():
    """Every function a public C++ header (kir/**/*.hpp) declares out of line is
    defined in the libkir.a this package ships (a header once declared
    decompress_lz4_block(src, size, out), which nothing defined); the C headers'
    functions are in libkir.a too, the hook layer's in libkir_hook.so."""
    include = ROOT / "libkir" / "include" / "kir"
    headers = sorted(include.rglob("*.hpp")) + sorted(include.glob("*.h"))
    declared = clang_declarations(headers)
    assert "_ZN3kir6Binary4openERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEENS_13BinaryOptionsE" in declared
    assert len(declared) > 100
    symbols = defined_symbols(LIBDIR / "libkir.a", LIBDIR / "libkir_hook.so")
    missing = {name: at for name, at in declared.items() if name not in symbols}
    assert not missing, "declared but never defined: " + ", ".join(
        f"{subprocess.run(['c++filt', n], capture_output=True, text=True).stdout.strip()} ({f}:{l})"
        for n, (f, l) in sorted(missing.items()))


# ---- the CMake package --------------------------------------------------------

def test_cmake_package_names_no_xxhash_and_no_build_machine_paths():
    """The exported targets are relocatable and need no libxxhash (kir uses its
    header only): no absolute path, no xxhash; kir::kir_static's compression
    libraries are the kir::zstd/lz4/zlib that kirConfig.cmake finds where it
    is used. libkir.so needs no libxxhash either."""
    cmake = Path(kir.cmake_dir())
    files = sorted(cmake.glob("kirTargets*.cmake"))
    assert len(files) >= 2
    for path in files:
        text = path.read_text()
        assert "xxhash" not in text.lower(), path
        for line in text.splitlines():
            if not line.lstrip().startswith("#") and re.search(r'[";]/[^"]', line):
                pytest.fail(f"{path.name}: an absolute path: {line.strip()}")
    targets = (cmake / "kirTargets.cmake").read_text()
    assert "${_IMPORT_PREFIX}/kir/include" in targets
    static = targets[targets.index("set_target_properties(kir::kir_static PROPERTIES"):]
    static = static[:static.index("\n)\n")]
    assert 'INTERFACE_LINK_LIBRARIES "kir::zstd;kir::lz4;kir::zlib;Threads::Threads"' in static
    with open(LIBDIR / "libkir.so", "rb") as f:
        needed = [t.needed for t in ELFFile(f).get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"]
    assert needed and not [n for n in needed if "xxhash" in n], needed


def test_wheel_holds_one_copy_of_each_library():
    """The installed package's lib/ holds each library once (a wheel stores symlinks
    as copies: libkir.so, .so.0 and .so.0.1.0 were three)."""
    names = sorted(p.name for p in LIBDIR.iterdir() if p.is_file())
    assert [n for n in names if n.startswith("libkir.so")] == ["libkir.so"]
    with open(LIBDIR / "libkir.so", "rb") as f:
        soname = [t.soname for t in ELFFile(f).get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_SONAME"]
    assert soname == ["libkir.so"]


# ---- the README's two commands ---------------------------------------------------

def test_readme_commands_install_only_into_the_checkouts_venv(tmp_path):
    """The README's two commands are what CI runs (.ci/run execs tests/run.sh);
    both source scripts/venv.sh before any pip, and every pip is `python -m pip`
    of that environment — none into the system Python (no python3 -m pip,
    --user or --break-system-packages). venv.sh, run where no environment is
    active, creates .venv in the checkout and activates it."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Two commands"):]
    block = block[block.index("```sh"):]
    block = block[:block.index("```", 5)]
    assert [line.split("#")[0].strip() for line in block.splitlines()[1:]] == [
        "bash examples/demo.sh", "bash tests/run.sh"]
    assert "bash tests/run.sh" in (ROOT / ".ci" / "run").read_text()  # its environment: test_environment.py
    for script in (ROOT / "examples" / "demo.sh", ROOT / "tests" / "run.sh"):
        lines = [line.split("#")[0].strip() for line in script.read_text().splitlines()]
        venv = lines.index(". scripts/venv.sh")
        for number, line in enumerate(lines):
            if re.search(r"(^|[;&|]\s*)pip3?\b", line):
                pytest.fail(f"{script.name}: bare pip: {line}")
            if re.search(r"\bpip\b", line):
                assert number > venv and line.startswith("python -m pip "), f"{script.name}: {line}"
                assert not re.search(r"--user|--break-system-packages|sudo", line), line
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "venv.sh", tmp_path / "scripts")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not Path(p, "activate").exists())
    proc = subprocess.run(["bash", "-c", ". scripts/venv.sh && python -c 'import sys; print(sys.prefix)'"],
                          cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == tmp_path / ".venv"
    assert (tmp_path / ".venv" / "pyvenv.cfg").is_file()
