"""`kir import-mneme`: Mneme recordings, written here byte for byte as Mneme's
recorder writes them (Olympus-HPC/Mneme 4442a49, functions cited at each writer
below), around the IR of a real CUDA kernel built with clang-22 at test time, are
converted into kir records that `kir records` lists, `kir replay --plan --code ir`
plans, and that hold exactly the generator's bytes. Malformed recordings give exit 2
and an error naming the file and the byte offset."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import strategies as st

import damage
import kir._core as core
from kir.app import gpu_driver_problem
from kir.record import Record, Recording
from mneme_writer import (  # noqa: F401
    GLOBAL_ADDR,
    KERNEL,
    PAGE,
    VA_BASE,
    VA_SIZE,
    Blob,
    Meta,
    bytes_snapshot,
    ints,
    kernel_ir,  # (kernel_ir, recording: fixtures)
    recording,
    rewritten_by_python,
    u64,
    write_recording,
)
from record_fuzz import fuzz_folder  # the records' fuzzer's mutations, with its u64 op

# --- conversion ----------------------------------------------------------------------

def test_import_lists_plans_and_round_trips(recording, kernel_ir, tmp_path, kir_cli):
    src, launches = recording
    out = tmp_path / "kir"
    result = kir_cli("import-mneme", src, "-o", out)
    assert result.returncode == 0, result.stderr
    assert "2 records written" in result.stdout

    listed = kir_cli("records", out, "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)["records"]) == 2

    records = {tuple(r.launch.grid): r for r in Recording(out).records()}
    assert len(records) == 2
    static = str(core.static_hash(KERNEL, "ir", [kernel_ir]))
    for launch in launches:
        record = records[launch.grid]
        assert record.kernel.name == KERNEL
        assert record.kernel.static_hash == static  # kir's hash over the IR, code kind "ir"
        assert record.code("ir") == kernel_ir
        assert record.kernel.image is None
        assert [bytes(a) for a in record.launch.args] == launch.args
        assert tuple(record.launch.block) == launch.block
        # the parameter layout: pointers 8, the struct 8 (align 4), the long long 8, the int 4
        assert [(p.offset, p.size) for p in record.kernel.params] == [(0, 8), (8, 8), (16, 8), (24, 8), (32, 4)]
        assert (record.va_range.base, record.va_range.size) == (VA_BASE, VA_SIZE)
        by_address = {r.address: r for r in record.allocations}
        assert set(by_address) == {VA_BASE, VA_BASE + 2 * PAGE}
        assert all(r.in_va_range and r.kind == "device" for r in record.allocations)
        for name, address in (("in", VA_BASE), ("out", VA_BASE + 2 * PAGE)):
            assert record.prologue(by_address[address]) == launch.prologue[name]
            assert record.epilogue(by_address[address]) == launch.epilogue[name]
        (g,) = record.globals
        assert (g.name, g.address) == ("launched", GLOBAL_ADDR)
        assert record.prologue(g) == launch.prologue["launched"]
        assert record.epilogue(g) == launch.epilogue["launched"]
        assert record.flags == []

        plan = kir_cli("replay", record.path, "--plan", "--code", "ir", "--json")
        assert plan.returncode == 0, plan.stderr
        assert "do not match" not in plan.stderr
        doc = json.loads(plan.stdout)
        assert doc["code"]["kind"] == "ir"
        launched = kir_cli("replay", record.path, "--plan")  # "launched" is the IR for an IR-only record
        assert launched.returncode == 0, launched.stderr
        cubin = kir_cli("replay", record.path, "--plan", "--code", "cubin")
        assert cubin.returncode == 2 and "use --code ir" in cubin.stderr


def test_the_launch_identity_is_kirs(recording, tmp_path):
    """The record's launch identity is kir's (docs/hashing.md), not Mneme's dynamic hash."""
    from kir.mneme import convert
    from kir.replay.planner import recompute_hashes
    src, launches = recording
    done = convert(src, tmp_path / "kir")
    assert sorted(int(d.mneme_dynamic) for d in done) == sorted(launch.dynamic for launch in launches)
    for d in done:
        record = Record.load(d.record)
        assert recompute_hashes(record).match


def test_check_writes_nothing(recording, tmp_path, kir_cli):
    src, _ = recording
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir", "--check")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "kir").exists()


# --- malformed recordings ------------------------------------------------------------

def fails(kir_cli, src: Path, out: Path, *expected: str) -> str:
    result = kir_cli("import-mneme", src, "-o", out)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr
    assert not (out / "records").exists() or not list((out / "records").iterdir())  # nothing written
    return result.stderr


def test_truncated_prologue(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[1].prologue_file
    data = path.read_bytes()
    # cut inside the second blob's bytes: globals (8 + 8+8+8+8+8) then blob count (8), blob 1
    blob2_data = 8 + (8 + 8 + 8 + 8 + 8) + 8 + (24 + 20000 + 19) + 24
    path.write_bytes(data[:blob2_data + 100])
    fails(kir_cli, src, tmp_path / "kir", f"{path}: byte {blob2_data}: truncated: blob #1 at",
          "needs 20000 bytes, 100 remain")


def test_truncated_diff_epilogue(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[0].epilogue_file
    path.write_bytes(path.read_bytes()[:-3])
    fails(kir_cli, src, tmp_path / "kir", str(path), "truncated")


def test_diff_range_past_the_end(recording, tmp_path, kir_cli):
    src, launches = recording
    path = src / launches[0].epilogue_file
    data = bytearray(path.read_bytes())
    at = 13 + 8 + 8 + len("launched") + 8 + 8 + 8  # the global's first range's offset
    data[at:at + 8] = u64(6)  # 6 + its length > the global's 8 bytes
    path.write_bytes(bytes(data))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: byte {at}: global 'launched': range #0", "runs past its 8 bytes")


def test_json_missing_field(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    key = next(iter(doc["instances"]))
    del doc["instances"][key]["GridDims"]
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: instances['{key}']: missing field 'GridDims'")


def test_json_wrong_type_and_missing_va(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    doc["VASize"] = "4GiB"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: VASize: expected int, found str")
    del doc["VAddr"]
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: missing field 'VAddr'")


def test_wrong_argument_size(recording, tmp_path, kir_cli, kernel_ir):
    """An argument whose recorded size is not the IR parameter's (the 8-byte long long as 4)."""
    src, launches = recording
    launch = launches[1]
    path = src / launch.prologue_file
    bad = launch.args[:3] + [ints([11])] + launch.args[4:]
    snap = bytes_snapshot([("launched", GLOBAL_ADDR, launch.prologue["launched"])],
                          [Blob(VA_BASE, launch.prologue["in"]), Blob(VA_BASE + 2 * PAGE, launch.prologue["out"])], bad)
    path.write_bytes(snap)
    fails(kir_cli, src, tmp_path / "kir", f"{path}: argument 4 (bias) is 4 bytes, the kernel's parameter is 8")


def test_blob_size_mismatch_between_prologue_and_epilogue(recording, tmp_path, kir_cli):
    src, launches = recording
    launch = launches[1]  # the bytes epilogue
    path = src / launch.epilogue_file
    path.write_bytes(bytes_snapshot([("launched", GLOBAL_ADDR, launch.epilogue["launched"])],
                                    [Blob(VA_BASE, launch.epilogue["in"][:-4]),
                                     Blob(VA_BASE + 2 * PAGE, launch.epilogue["out"])], launch.args))
    fails(kir_cli, src, tmp_path / "kir", f"{path}: the blob at {VA_BASE:#x} is missing or differs in size")


def test_missing_files_and_folders(recording, tmp_path, kir_cli):
    src, launches = recording
    fails(kir_cli, tmp_path / "nowhere", tmp_path / "kir", "not a directory")
    (src / launches[0].epilogue_file).unlink()
    fails(kir_cli, src, tmp_path / "kir", f"{src / launches[0].epilogue_file}: missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    fails(kir_cli, empty, tmp_path / "kir", "no Mneme recording here")


def test_file_names_stay_in_the_folder(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    key = next(iter(doc["instances"]))
    doc["instances"][key]["Prologue"] = "../../etc/passwd"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", "is not a file name in the recording's folder")


def test_ir_without_the_kernel(recording, tmp_path, kir_cli):
    src, _ = recording
    path = next(src.glob("*.json"))
    doc = json.loads(path.read_text())
    doc["KernelName"] = "_Z7missingv"
    path.write_text(json.dumps(doc))
    fails(kir_cli, src, tmp_path / "kir", "does not define the kernel _Z7missingv")


def test_ir_that_crashes_llvm_is_an_error(kernel_ir, tmp_path, kir_cli):
    """RecordedIR_*.bc a mutant of the real module (tests/support/damage.py) that crashes
    llvmlite's LLVM: kir reads it in its worker, exit 2 with one line naming the file
    (issue 21 §9)."""
    crasher = damage.first_crasher(damage.mutants(kernel_ir, 21, 200), tmp_path)
    write_recording(tmp_path / "mneme", crasher)
    error = fails(kir_cli, tmp_path / "mneme", tmp_path / "kir", "RecordedIR_", " crashed (SIG", "reading this module")
    assert error.startswith("kir: error: ") and error.count("\n") == 1, error


def test_annotated_integer_blob_warns(recording, tmp_path, kir_cli):
    """A blob annotated with a tolerance (mneme::annotate) over an integer dtype (I32)
    converts with a warning and no tolerance in the record: kir's tolerances compare
    floating point only (issue 24 §6 changed this test: before, every annotation warned
    that records had no field for it)."""
    src, launches = recording
    launch = launches[1]
    meta = Meta(builtin=5, threshold=1e-3, threshold_kind=1, norm=2, tag=b"out")
    (src / launch.epilogue_file).write_bytes(bytes_snapshot(
        [("launched", GLOBAL_ADDR, launch.epilogue["launched"])],
        [Blob(VA_BASE, launch.epilogue["in"]), Blob(VA_BASE + 2 * PAGE, launch.epilogue["out"], meta)], launch.args))
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir")
    assert result.returncode == 0, result.stderr
    assert (f"the blob at {VA_BASE + 2 * PAGE:#x} carries a Mneme tolerance (relative, threshold 0.001): its dtype "
            "i32 is not floating point") in result.stderr
    assert result.stderr.count("warning") == 1
    assert all(r.tolerance is None for record in Recording(tmp_path / "kir").records() for r in record.allocations)


def test_tolerances_are_the_records_and_replay_uses_them(kernel_ir, tmp_path, kir_cli):
    """Mneme's annotation of the output buffer (F32, Absolute, Norm::None: per element,
    which is kir's abs under linf) becomes the record's tolerance of that allocation;
    the replay's comparison picks it when the command line gives none (and the command
    line's when it does): an output within it verifies, one beyond it does not."""
    import numpy as np

    from kir.replay.comparison import Tolerance, check, tolerance_for
    src = tmp_path / "mneme"
    write_recording(src, kernel_ir, out_meta=Meta(builtin=9, threshold=0.5, threshold_kind=0, norm=0, tag=b"out"))
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir")
    assert result.returncode == 0 and "warning" not in result.stderr, result.stderr
    records = list(Recording(tmp_path / "kir").records())
    assert len(records) == 2
    for record in records:
        by_address = {r.address: r for r in record.allocations}
        out, inp = by_address[VA_BASE + 2 * PAGE], by_address[VA_BASE]
        assert out.tolerance == {"dtype": "float32", "kind": "abs", "threshold": 0.5, "norm": "linf", "tag": "out"}
        assert inp.tolerance is None and tolerance_for(inp, None) is None  # not annotated: bitwise
        chosen = tolerance_for(out, None)
        assert chosen == Tolerance(atol=0.5, norm="linf", dtype="float32")
        assert tolerance_for(out, Tolerance(atol=2.0)) == Tolerance(atol=2.0)  # the command line's wins
        expected = record.epilogue(out)
        values = np.frombuffer(expected, "<f4").copy()
        i = int(np.flatnonzero(np.isfinite(values))[0])
        for delta, within in ((0.25, True), (1.0, False)):
            actual = values.copy()
            actual[i] += delta
            found = check(out, actual.tobytes(), expected, chosen)
            assert found is not None and found.within is within, (delta, found)


def test_relative_tolerances_are_kirs_nearest_with_a_warning(kernel_ir, tmp_path, kir_cli):
    """Relative (per element |r - e| / |e| in Mneme) has no exact kir form: the record
    gets kir's rel under the same norm, and the import says how they differ."""
    src = tmp_path / "mneme"
    write_recording(src, kernel_ir, out_meta=Meta(builtin=10, threshold=1e-6, threshold_kind=1, norm=3))
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("Mneme's relative error is per element, linf of |r - e| / |e| <= 1e-06") == 2
    for record in Recording(tmp_path / "kir").records():
        (out,) = [r for r in record.allocations if r.address == VA_BASE + 2 * PAGE]
        assert out.tolerance == {"dtype": "float64", "kind": "rel", "threshold": 1e-6, "norm": "linf", "tag": ""}


def test_nothing_mneme_wrote_is_lost(kernel_ir, tmp_path, kir_cli):
    """`Specializations` become the records' runtime-constant arguments (kernel.jit_args:
    affine's `long long bias` and `int n`, the scalars mneme::canSpecialize flags);
    `Occurrences` and the output buffer's tolerance (mneme::annotate) are kept in
    mneme-import.json and the --json output; an output path several folders deep is made."""
    src = tmp_path / "mneme"
    meta = Meta(builtin=9, threshold=1e-3, threshold_kind=1, norm=2, tag=b"out")  # F32, Relative, L2
    launches = write_recording(src, kernel_ir, occurrences=(3, 1), out_meta=meta)
    out = tmp_path / "deep" / "er" / "kir"
    result = kir_cli("import-mneme", src, "-o", out, "--json")
    assert result.returncode == 0, result.stderr
    rows = {r["mneme_dynamic_hash"]: r for r in json.loads(result.stdout)["records"]}
    expected_tolerance = [{"address": VA_BASE + 2 * PAGE, "dtype": "f32", "threshold": 1e-3,
                           "threshold_kind": "relative", "norm": "l2", "tag": "out"}]
    kept = json.loads((out / "mneme-import.json").read_text())["records"]
    for launch, occurrences in zip(launches, (3, 1)):
        row = rows[str(launch.dynamic)]
        assert row["occurrences"] == occurrences and row["jit_args"] == [4, 5]
        assert row["tolerances"] == expected_tolerance
        record = Record.load(row["record"])
        assert [(a.position, a.kind.name, a.type.name) for a in record.kernel.jit_args] == \
            [(4, "scalar", "i64"), (5, "scalar", "i32")]
        (annotated,) = [r for r in record.allocations if r.tolerance]  # F32, Relative, L2: kir's rel/l2
        assert (annotated.address, annotated.tolerance) == (VA_BASE + 2 * PAGE, {
            "dtype": "float32", "kind": "rel", "threshold": 1e-3, "norm": "l2", "tag": "out"})
        assert kept[Path(row["record"]).name] == {k: v for k, v in row.items() if k != "record"}


def test_a_database_mneme_python_rewrote(kernel_ir, tmp_path, kir_cli):
    """After `mneme copy` (Mneme's Python rewrites the JSON: indented, `Args` holding the
    Specializations, another key order) the import is the same: records, JIT arguments,
    occurrences."""
    src = tmp_path / "mneme"
    write_recording(src, kernel_ir, occurrences=(4, 2))
    before = kir_cli("import-mneme", src, "-o", tmp_path / "c", "--json")
    database = next(src.glob("*.json"))
    database.write_text(rewritten_by_python(database.read_text()))
    after = kir_cli("import-mneme", src, "-o", tmp_path / "py", "--json")
    assert before.returncode == after.returncode == 0, after.stderr
    rows = [sorted(({k: v for k, v in r.items() if k != "record"} for r in json.loads(x.stdout)["records"]),
                   key=lambda r: r["mneme_dynamic_hash"]) for x in (before, after)]
    assert rows[0] == rows[1] and sorted(r["occurrences"] for r in rows[1]) == [2, 4]
    assert all(r["jit_args"] == [4, 5] for r in rows[1])
    names = [sorted(p.name for p in (tmp_path / d / "records").iterdir()) for d in ("c", "py")]
    assert names[0] == names[1] and len(names[0]) == 2


def test_specializations_that_do_not_fit_the_kernel(recording, tmp_path, kir_cli):
    src, _ = recording
    database = next(src.glob("*.json"))
    doc = json.loads(database.read_text())
    for flags, message in (([True] * 4, "Specializations has 4 flags, _Z6affinePiPKi6Affinexi takes 5"),
                           ([True, False, False, False, False], "Specializations[0]: argument 1 is ptr"),
                           ([1, 0, 0, 0, 0], "Specializations[0]: expected bool, found int")):
        database.write_text(json.dumps({**doc, "Specializations": flags}))
        result = kir_cli("import-mneme", src, "-o", tmp_path / "kir")
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert result.stderr.count("\n") == 1


# --- --app: the key the running app computes -------------------------------------------

def app_static_hashes(kir_cli, app) -> set[str]:
    """affine's static hash in `app`, as `kir hash APP --json` reports it (one per image)."""
    hashed = kir_cli("hash", app, "--jsonl")
    assert hashed.returncode == 0, hashed.stderr
    return {d["static"] for d in map(json.loads, hashed.stdout.splitlines()) if d["kernel"] == KERNEL}


def test_app_keys_the_records_by_the_apps_static_hash(kernel_ir, built, tmp_path, kir_cli):
    """Mneme stores the module Proteus extracted (here mneme_affine.bc); the app embeds its
    unit's module as the Proteus pass does (mneme_affine_app), other bytes. Without --app
    the records' static hash is the one over Mneme's module, which the app never computes;
    with --app it is what the hook computes as the app registers affine (`kir trace`), and
    what `kir hash APP` and kir.hashing report for affine in the app, the
    launch identity follows it, the replay planner recomputes the same hashes from the
    record (which holds the app's image), and Mneme's module hash stays in
    mneme-import.json."""
    from kir import hashing
    from kir.binary import Binary
    from kir.mneme import convert
    from kir.replay.planner import recompute_hashes
    app = built["mneme_affine_app"]
    src = tmp_path / "mneme"
    launches = write_recording(src, kernel_ir)
    (app_static,) = app_static_hashes(kir_cli, app)
    traced = kir_cli("trace", "--json", "--", app)  # the hook's own hash, as the app registers affine
    # Without a driver the app launches nothing, and kir trace says so (exit 1); its
    # registrations are traced all the same.
    assert traced.returncode == (0 if gpu_driver_problem() is None else 1), traced.stderr
    assert [e["static"] for e in map(json.loads, traced.stdout.splitlines())
            if e["event"] == "register-kernel" and e["kernel"] == KERNEL] == [app_static]
    with Binary.open(str(app)) as binary:
        assert {h.static_hash for h in hashing.kernel_hashes(binary)[0] if h.kernel == KERNEL} == {app_static}
    module_static = str(core.static_hash(KERNEL, "ir", [kernel_ir]))
    assert app_static != module_static  # what the issue reports: the two never meet
    assert {Record.load(d.record).kernel.static_hash for d in convert(src, tmp_path / "plain")} == {module_static}

    out = tmp_path / "kir"
    result = kir_cli("import-mneme", src, "-o", out, "--app", app, "--json")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    rows = {r["mneme_dynamic_hash"]: r for r in json.loads(result.stdout)["records"]}
    kept = json.loads((out / "mneme-import.json").read_text())["records"]
    for launch in launches:
        row = rows[str(launch.dynamic)]
        record = Record.load(row["record"])
        assert record.kernel.static_hash == app_static
        assert record.launch.launch_identity == hashing.launch_identity(
            app_static, "sm_90", launch.args, grid=launch.grid, block=launch.block, shared_bytes=0)
        assert Path(row["record"]).name.startswith(app_static)
        assert recompute_hashes(record).match
        assert record.code("ir") == kernel_ir  # replays and tunes from Mneme's module as before
        assert (record.kernel.image.kind, record.kernel.image.arch) in {("cubin", "sm_90"), ("ptx", "sm_90")}
        entry = kept[Path(row["record"]).name]
        assert (entry["static"], entry["module_static"], entry["app"]) == (app_static, module_static,
                                                                                      str(app))
        assert entry["mneme_static_hash"] == 15941914485064662553 and "in cubin image" in entry["app_image"]


@pytest.mark.parametrize("arch, image", [("sm_90", ("cubin", "sm_90")), ("sm_86", ("cubin", "sm_80")),
                                         ("sm_100", ("ptx", "sm_90")), ("sm_70", ("cubin", "sm_90"))])
def test_the_image_the_hook_would_load(built, kir_cli, arch, image):
    """Without embedded IR each image of a kernel hashes differently: --app takes the one
    kir's hook loads on a device of the record's arch (libkir/hook/image_choice.cpp): its
    cubin, a cubin of the same major and lower minor, PTX not above it, else (none suits)
    the highest cubin. `app`: nvcc's sm_75/80/90 cubins and compute_90 PTX."""
    from kir.mneme import find_in_app
    app = built["app"]
    hashed = kir_cli("hash", app, "--jsonl")
    by_image = {(d["image_kind"], d["target"]): d["static"] for d in map(json.loads, hashed.stdout.splitlines())
                if d["kernel"] == "_Z4axpyfPKfPfi"}
    assert len(set(by_image.values())) == len(by_image) == 4
    found, missing = find_in_app(app, [("_Z4axpyfPKfPfi", arch), ("_Z7missingv", arch)])
    code = found["_Z4axpyfPKfPfi"]
    assert ((code.image_kind, code.image_arch), str(code.static_hash)) == (image, by_image[image])
    assert missing == {"_Z7missingv": f"{app}: no kernel _Z7missingv in its device code"}


def test_a_kernel_the_app_lacks_keeps_its_hash(kernel_ir, built, tmp_path, kir_cli):
    """--app naming a binary without affine (proteus_cuda): a warning naming the app and
    the kernel per record, which keeps the hash over Mneme's module."""
    app = built["proteus_cuda"]
    assert not app_static_hashes(kir_cli, app)
    src = tmp_path / "mneme"
    write_recording(src, kernel_ir)
    out = tmp_path / "kir"
    result = kir_cli("import-mneme", src, "-o", out, "--app", app)
    assert result.returncode == 0, result.stderr
    module_static = str(core.static_hash(KERNEL, "ir", [kernel_ir]))
    warnings = [line for line in result.stderr.splitlines() if line.startswith("kir: warning: ")]
    assert len(warnings) == 2, result.stderr
    assert all(f"{app}: no kernel {KERNEL} in its device code" in w and f"({module_static})" in w for w in warnings)
    records = list(Recording(out).records())
    assert len(records) == 2 and all(r.kernel.static_hash == module_static and r.kernel.image is None
                                     for r in records)
    assert all(e["app"] is None for e in json.loads((out / "mneme-import.json").read_text())["records"].values())


def test_app_that_is_not_a_binary(recording, tmp_path, kir_cli):
    """--app naming no binary: one line naming it, exit 2, nothing written."""
    src, _ = recording
    text = tmp_path / "notes.txt"
    text.write_text("not an app\n")
    for app, message in ((text, f"kir: error: --app: {text}: not an ELF file"),
                         (tmp_path / "nowhere", f"kir: error: --app: {tmp_path / 'nowhere'}: cannot open")):
        result = kir_cli("import-mneme", src, "-o", tmp_path / "kir", "--app", app)
        assert result.returncode == 2 and result.stderr.startswith(message), result.stderr
        assert result.stderr.count("\n") == 1 and not (tmp_path / "kir").exists()


# --- on the GPU ----------------------------------------------------------------------

def test_replay_imported_record_from_ir(gpu, recording, tmp_path, kir_cli):
    """An imported record replays from its IR and its output matches the epilogue the
    generator computed (the oracle: the kernel's arithmetic in Python)."""
    src, _ = recording
    out = tmp_path / "kir"
    assert kir_cli("import-mneme", src, "-o", out).returncode == 0
    for record in Recording(out).records():
        result = kir_cli("replay", record.path, "--code", "ir")
        assert result.returncode == 0, (result.stdout, result.stderr)


def test_replay_app_keyed_record(gpu, kernel_ir, built, tmp_path, kir_cli):
    """Imported with --app, a record replays verified with its default code (the app's
    image, whose hash it carries) and from Mneme's IR."""
    src = tmp_path / "mneme"
    write_recording(src, kernel_ir)
    out = tmp_path / "kir"
    assert kir_cli("import-mneme", src, "-o", out, "--app", built["mneme_affine_app"]).returncode == 0
    records = list(Recording(out).records())
    assert len(records) == 2 and all(r.kernel.image is not None for r in records)
    for record in records:
        for code in ("launched", "ir"):
            result = kir_cli("replay", record.path, "--code", code, "--json")
            assert result.returncode == 0, (code, result.stdout, result.stderr)
            doc = json.loads(result.stdout)
            assert doc["verified"] and doc["hashes_match"], (code, doc)


def test_json_output(recording, tmp_path, kir_cli):
    src, launches = recording
    result = kir_cli("import-mneme", src, "-o", tmp_path / "kir", "--json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["format"] == "kir.import-mneme/1"
    assert sorted(r["mneme_dynamic_hash"] for r in doc["records"]) == sorted(str(x.dynamic) for x in launches)
    assert all(r["mneme_static_hash"] == 15941914485064662553 and Path(r["record"]).is_file() and r["regions"] == 3
               for r in doc["records"])


# --- fuzzing the reader (issue 21 §18) -------------------------------------------------

FUZZ_EXAMPLES = int(os.environ.get("KIR_FUZZ_MNEME_EXAMPLES", "300"))

MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(b"")),
    # a length, count, size or address field (Mneme's are u64s): set to an extreme
    st.tuples(st.just("u64"), st.integers(0, 1 << 16),
              st.sampled_from([0, 1, 7, 0xFFFF, 0xFFFFFFFF, 1 << 40, (1 << 63) - 1, (1 << 64) - 1])),
)


@pytest.mark.slow  # a fuzz loop
def test_damaged_recordings_raise_only_mneme_errors(kernel_ir, tmp_path):
    """A small recording (both epilogue formats), one of its files — the JSON, a
    prologue, a diff or a bytes epilogue — mutated at random (fixed seed, a bounded
    number of examples; KIR_FUZZ_MNEME_EXAMPLES raises it), then checked as `kir
    import-mneme --check` does: a conversion or a KirError naming the file, never
    another exception."""
    from kir.errors import KirError
    from kir.mneme import convert
    source = tmp_path / "mneme"
    write_recording(source, kernel_ir, sizes=(600, 40))
    files = sorted(p.name for p in source.iterdir() if not p.name.endswith(".bc"))
    assert len(files) == 5 and len(convert(source, tmp_path / "out", write=False)) == 2
    outcomes = fuzz_folder(source, files, convert, KirError, FUZZ_EXAMPLES, MUTATION)
    assert outcomes["refused"] > FUZZ_EXAMPLES // 2 and outcomes["read"] > 0, outcomes
