"""The command line as a user of cuobjdump / llvm-objdump expects it: --version,
several inputs and directories (-r) for inspect / hash / extract, --require as a
CI check (cuobjdump's listing is the oracle), one spelling per option, exit
codes, a closed pipe."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kir

KIR = [sys.executable, "-m", "kir"]
ROOT = Path(__file__).resolve().parents[2]


def cuobjdump_targets(cuobjdump, path) -> set[str]:
    """{'sm_90' (a cubin), 'compute_90' (PTX)} as cuobjdump lists them."""
    proc = subprocess.run([cuobjdump, "-lelf", "-lptx", str(path)], capture_output=True, text=True)
    found = set()
    for line in proc.stdout.splitlines():
        m = re.match(r"(ELF|PTX) file\s+\d+: .*\.(sm_\d+)\.(cubin|ptx)$", line)
        if m:
            found.add(m.group(2) if m.group(1) == "ELF" else "compute_" + m.group(2)[3:])
    return found


# --- --version ---------------------------------------------------------------------------

def test_version(kir_cli):
    from importlib import metadata
    result = kir_cli("--version")
    assert result.returncode == 0 and result.stderr == ""
    lines = result.stdout.splitlines()
    assert lines[0] == f"kir-kernel-ir {metadata.version('kir-kernel-ir')}"
    # libkir's version and C ABI: the major version, as CMake's SOVERSION gives an
    # installed prefix's libkir.so (CMakeLists.txt's project version)
    major = re.search(r"project\(kir VERSION (\d+)\.", (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert lines[1] == f"libkir {kir.__version__} (C ABI {major})"
    # the hook API: what kir/hooks.h says
    header = (Path(__file__).resolve().parents[2] / "libkir" / "include" / "kir" / "hooks.h").read_text()
    api = re.search(r"#define KIR_HOOK_API_VERSION (\d+)", header).group(1)
    assert lines[2] == f"hook API {api}"


# --- several inputs ----------------------------------------------------------------------

def test_inspect_several_files(built, kir_cli):
    files = [built["app"], built["kernels.fatbin"], built["host_only"]]
    result = kir_cli("inspect", *files)
    assert result.returncode == 0, result.stderr
    blocks = result.stdout.split("\n\n")
    assert len(blocks) == 4  # three tables, the summary
    for block, path in zip(blocks, files):
        single = kir_cli("inspect", path).stdout
        assert block + "\n" == single  # each file's table as alone, header first
        assert block.startswith(f"{path}: ")
    images = sum(len(kir.open(p).images) for p in files)
    assert blocks[-1] == f"kir: 3 files, {images} images\n"


def test_inspect_several_files_json(built, kir_cli):
    files = [built["app"], built["kernels.fatbin"]]
    result = kir_cli("inspect", "--json", "--kind", "cubin", *files)
    assert result.returncode == 0
    report = json.loads(result.stdout)
    assert report["schema"] == "kir.inspect-files/1"
    assert [r["path"] for r in report["files"]] == [str(p) for p in files]
    for r, path in zip(report["files"], files):
        alone = json.loads(kir_cli("inspect", "--json", "--kind", "cubin", path).stdout)
        assert r == alone
    assert report["errors"] == [] and report["skipped"] == 0


def test_an_unreadable_input_is_named_and_the_others_are_read(built, kir_cli, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a binary\n")
    result = kir_cli("inspect", built["app"], text, tmp_path / "missing")
    assert result.returncode == 2
    assert result.stdout.startswith(f"{built['app']}: elf")
    assert f"{text}: not an ELF file" in result.stderr
    assert "missing" in result.stderr and "Traceback" not in result.stderr
    assert "2 unreadable" in result.stdout.splitlines()[-1]


@pytest.fixture
def tree(built, tmp_path):
    """A prefix: device code at two depths, a host library, text, a FIFO, a symlink
    loop, a dangling link and a link to a library already in the tree."""
    root = tmp_path / "prefix"
    (root / "lib" / "sub").mkdir(parents=True)
    (root / "share").mkdir()
    shutil.copy(built["app"], root / "lib" / "app")
    shutil.copy(built["libkernels.so"], root / "lib" / "sub" / "libkernels.so.1")
    os.symlink("libkernels.so.1", root / "lib" / "sub" / "libkernels.so")
    shutil.copy(built["host_only"], root / "lib" / "host_only")
    (root / "share" / "README").write_text("text\n")
    os.mkfifo(root / "share" / "fifo")
    os.symlink("../..", root / "lib" / "sub" / "up")  # a loop
    os.symlink("nowhere", root / "share" / "dangling")
    return root


def test_inspect_recursive(tree, kir_cli):
    result = kir_cli("inspect", "-r", tree)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # text, FIFO, loop, dangling link: skipped quietly
    headers = [l.split(":")[0] for l in result.stdout.splitlines() if l.startswith(str(tree))]
    # name order, each file once (the library under its first name), host code left out
    assert headers == [str(tree / "lib" / "app"), str(tree / "lib" / "sub" / "libkernels.so")]
    images = len(kir.open(tree / "lib" / "app").images) + len(kir.open(tree / "lib" / "sub" / "libkernels.so").images)
    assert result.stdout.splitlines()[-1] == f"kir: 2 files, {images} images; 1 skipped (no device code)"
    report = json.loads(kir_cli("inspect", "-r", "--json", tree).stdout)
    assert [r["path"] for r in report["files"]] == headers and report["skipped"] == 1


def test_a_directory_needs_recursive(tree, kir_cli):
    result = kir_cli("inspect", tree)
    assert result.returncode == 2 and "is a directory (give -r/--recursive" in result.stderr


@pytest.mark.parametrize("name", ["app", "kernels.fatbin", "libkernels.so", "host_only", "kernels_sm90.cubin"])
def test_require_agrees_with_cuobjdump(built, kir_cli, cuobjdump, name):
    path = built[name]
    have = cuobjdump_targets(cuobjdump, path)
    for wanted in ("sm_90", "sm_75", "compute_90", "compute_80"):
        result = kir_cli("inspect", "--require", wanted, path)
        if wanted in have:
            assert result.returncode == 0, (wanted, result.stderr)
        else:
            assert result.returncode == 1, (wanted, result.stdout)
            assert result.stderr == f"kir: {path} lacks {wanted}\n"


def test_require_names_each_binary_lacking(built, kir_cli, cuobjdump, tree):
    files = [built["app"], built["libkernels.so"], built["host_only"]]
    result = kir_cli("inspect", "--require", "sm_75,ptx", *files)
    assert result.returncode == 1
    expected = []
    for path in files:
        have = cuobjdump_targets(cuobjdump, path)
        missing = [w for w, ok in (("sm_75", "sm_75" in have), ("ptx", any(h.startswith("compute_") for h in have)))
                   if not ok]
        if missing:
            expected.append(f"kir: {path} lacks {', '.join(missing)}")
    assert result.stderr.splitlines() == expected and expected
    report = json.loads(kir_cli("inspect", "--json", "--require", "sm_75,ptx", *files).stdout)
    assert [f"kir: {l['path']} lacks {', '.join(l['missing'])}" for l in report["lacking"]] == expected
    # single file: the report carries "missing"
    single = kir_cli("inspect", "--json", "--require", "sm_90", built["host_only"])
    assert single.returncode == 1 and json.loads(single.stdout)["missing"] == ["sm_90"]
    # -r checks only the files with device code
    assert kir_cli("inspect", "-r", "--require", "sm_90", tree).returncode == 0


def test_require_quiet_prints_the_verdict_and_offenders_only(built, kir_cli, cuobjdump):
    files = [built["app"], built["libkernels.so"], built["host_only"], built["kernels_sm90.cubin"]]
    loud = kir_cli("inspect", "--require", "sm_75", *files)
    quiet = kir_cli("inspect", "-q", "--require", "sm_75", *files)
    assert quiet.returncode == loud.returncode == 1
    lacking = [p for p in files if "sm_75" not in cuobjdump_targets(cuobjdump, p)]
    assert quiet.stderr == loud.stderr == "".join(f"kir: {p} lacks sm_75\n" for p in lacking)
    assert len(loud.stdout.splitlines()) > 10
    verdict = loud.stdout.splitlines()[-1]
    assert quiet.stdout == verdict + "\n" and f"{len(lacking)} lack what --require asks" in verdict
    passing = kir_cli("inspect", "--quiet", "--require", "sm_90", built["app"])
    assert passing.returncode == 0 and passing.stdout.endswith("all hold what --require asks\n")
    assert passing.stdout.count("\n") == 1 and passing.stderr == ""
    refused = kir_cli("inspect", "-q", "--json", built["app"])
    assert refused.returncode == 2 and "-q/--quiet prints no table" in refused.stderr


def test_require_bad_item_is_a_usage_error(built, kir_cli):
    result = kir_cli("inspect", "--require", "hopper", built["app"])
    assert result.returncode == 2 and "--require: invalid item 'hopper'" in result.stderr


def test_hash_several_files(built, kir_cli):
    files = [built["app"], built["libkernels.so"]]
    result = kir_cli("hash", *files)
    assert result.returncode == 0
    # each file's lines follow a blank line and a "PATH:" line, as llvm-nm prints them
    assert result.stdout.startswith("\n")
    sections = result.stdout[1:].split("\n\n")
    assert len(sections) == len(files)
    for section, path in zip(sections, files):
        head, *lines = section.rstrip("\n").split("\n")
        assert head == f"{path}:"
        assert "\n".join(lines) + "\n" == kir_cli("hash", path).stdout
    lines = [json.loads(l) for l in kir_cli("hash", "--jsonl", *files).stdout.splitlines()]
    assert {l["path"] for l in lines} == {str(p) for p in files}


def test_hash_arch_filter(built, kir_cli):
    every = [json.loads(l) for l in kir_cli("hash", "--jsonl", built["app"]).stdout.splitlines()]
    sm80 = [json.loads(l) for l in kir_cli("hash", "--jsonl", "--arch", "sm_80", built["app"]).stdout.splitlines()]
    assert sm80 == [h for h in every if h["target"] == "sm_80"] and sm80


def test_extract_several_files(built, kir_cli, tmp_path):
    files = [built["app"], built["kernels.fatbin"]]
    result = kir_cli("extract", "--kind", "cubin", *files, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    for path in files:
        alone = tmp_path / ("alone-" + path.name)
        kir_cli("extract", "--kind", "cubin", path, "-o", alone)
        folder = tmp_path / "out" / path.name
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in alone.iterdir())
        for p in alone.iterdir():
            assert (folder / p.name).read_bytes() == p.read_bytes()


def test_extract_recursive_names_folders_by_path(tree, kir_cli, tmp_path):
    out = tmp_path / "out"
    result = kir_cli("extract", "-r", "--kind", "ptx", tree, "-o", out)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["lib_app", "lib_sub_libkernels.so"]


def test_extract_subfolder_is_not_followed_through_a_link(built, kir_cli, tmp_path):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "app")
    result = kir_cli("extract", built["app"], built["kernels.fatbin"], "-o", out)
    assert result.returncode == 2 and list(elsewhere.iterdir()) == []


# --- one spelling per option; options that do not apply ---------------------------------

def test_kernel_is_the_spelling_and_kernels_a_hidden_alias(kir_cli):
    for verb in ("trace", "record"):
        help_text = kir_cli(verb, "--help").stdout
        assert "--kernel REGEX" in help_text and "--kernels" not in help_text
    assert "--kernel REGEX" in kir_cli("hash", "--help").stdout


@pytest.mark.parametrize("args,needle", [
    (["--grid", "1,1,1"], "--grid: only with --jit-key"),
    (["--arg", "1:i32:3"], "--arg: only with --jit-key"),
])
def test_hash_options_of_the_other_form_are_errors(built, kir_cli, args, needle):
    result = kir_cli("hash", built["app"], *args)
    assert result.returncode == 2 and needle in result.stderr


def test_hash_binary_options_with_a_key_are_errors(kir_cli):
    result = kir_cli("hash", "--jit-key", "0" * 32, "--kernel", "x")
    assert result.returncode == 2 and "--kernel: only with a BINARY" in result.stderr


@pytest.mark.parametrize("verb", ["trace", "record", "records"])
def test_arch_where_it_does_not_apply_is_a_usage_error(kir_cli, verb, tmp_path):
    result = kir_cli(verb, "--arch", "sm_90", tmp_path)
    assert result.returncode == 2 and "--arch" in result.stderr


# --- a closed pipe -----------------------------------------------------------------------

@pytest.mark.parametrize("args", [["inspect", "--kernels"], ["hash"]])
def test_closed_pipe_ends_quietly(built, args):
    """`kir ... | head -1`: the reader leaves after one line; kir stops with no traceback
    and no 'Exception ignored' message."""
    # A large output: the same binary many times, so kir is still writing when head leaves.
    files = [str(built["app"])] * 40
    proc = subprocess.run(["bash", "-c", '"$@" | head -1; echo "status ${PIPESTATUS[0]}"', "bash", *KIR, *args,
                           *files], capture_output=True, text=True, timeout=300)
    kir_proc = subprocess.Popen([*KIR, *args, *files], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = kir_proc.stdout.readline()
    kir_proc.stdout.close()  # the reader leaves
    err = kir_proc.stderr.read().decode()
    status = kir_proc.wait(timeout=300)
    assert first
    assert err == "", err
    assert status == 141
    assert proc.stderr == "" and proc.stdout.splitlines()[1] == "status 141"


def test_inspect_kernel_filter(built, kir_cli):
    """--kernel REGEX, as hash and diff spell it: only matching kernels (mangled or
    demangled name), which implies --kernels."""
    every = json.loads(kir_cli("inspect", "--json", "--kernels", built["app"]).stdout)
    some = json.loads(kir_cli("inspect", "--json", "--kernel", r"scale<|axpy", built["app"]).stdout)
    for full, part in zip(every["images"], some["images"]):
        assert part["kernels"] == [k for k in full["kernels"]
                                   if re.search(r"scale<|axpy", k["name"]) or re.search(r"scale<|axpy", k["demangled"])]
    names = {k["name"] for i in some["images"] for k in i["kernels"]}
    assert names == {"_Z4axpyfPKfPfi", "_Z5scaleIfEvPT_S0_6Params", "_Z5scaleIdEvPT_S0_6Params"}
    text = kir_cli("inspect", "--kernel", "axpy", built["app"]).stdout
    assert "kernel axpy(float, float const*, float*, int)" in text and "scale<" not in text
    assert kir_cli("inspect", "--kernel", "(", built["app"]).returncode == 2


def test_threads_without_kernels_is_a_usage_error(built, kir_cli):
    result = kir_cli("inspect", "-j", "2", built["app"])
    assert result.returncode == 2 and "-j/--threads: only with --kernels" in result.stderr
    assert kir_cli("inspect", "-j", "2", "--kernels", built["app"]).returncode == 0
