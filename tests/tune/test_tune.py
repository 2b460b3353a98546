"""`kir tune` (kir.tune, issue 13 §2) without a GPU: the search space (presets,
files, the launch candidates), the search with Optuna over a stand-in for the
GPU launch (tests/support/tune_fakes.py: the record read and every variant resolved for
real, the time from a model the tests evaluate again), the report, the hand-off
to the JIT client — stored under the key the reference JIT client computes and
hit by it (the stub runtime of tests/support/jit_rig.py) — and the fan-out over
Dask workers sharing an Optuna journal. tests/tune/test_tune_gpu.py tunes real
recordings on the H200."""
from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("optuna")

import kir._core as core
import tune_fakes
from kir.cache import Cache
from kir.errors import OptionError
from kir.record import Record
from kir.replay import Variant, variant_jit_key
from kir.tune import Client, Space
from kir.tune.space import Point, block_candidates, derived_grid
from saxpy_record import saxpy, write_record  # noqa: F401  (the saxpy fixture)
from tune_fakes import cli

TESTS = Path(__file__).resolve().parents[1]


# --- the space -------------------------------------------------------------------------

@pytest.mark.parametrize("block, grid", [((256, 1, 1), (16, 1, 1)), ((16, 16, 1), (8, 4, 1)),
                                         ((8, 8, 4), (3, 5, 7)), ((96, 1, 1), (1, 1, 1))])
@pytest.mark.parametrize("safety", ["conservative", "balanced", "aggressive"])
def test_auto_blocks_cover_the_recorded_work(block, grid, safety):
    threads = math.prod(block)
    budget = {"conservative": threads, "balanced": 2 * threads, "aggressive": 1024}[safety]
    shapes = block_candidates(block, grid, safety)
    assert shapes[0] == block and len(set(shapes)) == len(shapes)
    for shape in shapes[1:]:
        assert min(32, threads) <= math.prod(shape) <= min(budget, 1024)
        g = derived_grid(block, grid, shape)
        for axis in range(3):
            used = block[axis] > 1 or grid[axis] > 1
            if used:  # covers the recorded work, with less than one block to spare
                assert g[axis] * shape[axis] >= block[axis] * grid[axis] > (g[axis] - 1) * shape[axis]
            else:
                assert shape[axis] == block[axis] and g[axis] == grid[axis]
    assert (len(shapes) > 1) == (safety != "conservative" or threads > 32)


@pytest.mark.parametrize("data, message", [
    ({"schema": "kir.tune-space/9"}, "this kir reads kir.tune-space/1"),
    ({"blocks": "auto"}, "unknown key(s) 'blocks'"),
    ({"preset": "fastest"}, "preset 'fastest'"),
    ({"opt_level": [1, 4]}, "opt_level: 4 is not one of 0, 1, 2, 3"),
    ({"opt_level": []}, "opt_level: an empty list of choices"),
    ({"codegen_opt": ["3"]}, "codegen_opt: '3' is not one of"),
    ({"maxrregcount": [8]}, "at least 16 registers"),
    ({"specialize_args": [1]}, "specialize_args: 1 is not one of false, true"),
    ({"block": [[2048, 1, 1]]}, "beyond CUDA's limits"),
    ({"block": [[1, 2]]}, "expected three integers"),
    ({"block": "largest"}, "expected \"auto\", \"recorded\" or a list"),
    ({"pipeline": ["no-such-pass"]}, "pipeline 'no-such-pass'"),
    ({"repeat": 0}, "repeat 0: expected an integer 1..100000"),
    ({"launch_safety": "yolo"}, "launch_safety 'yolo'"),
    ({"timing": "wall"}, "timing 'wall': expected each, graph or activity"),
    ({"fp_contract": ["maybe"]}, "fp_contract: 'maybe' is not one of"),
    ({"tolerance": {"ulp": -1}}, "tolerance: ulp -1"),
    ({"tolerance": {"ulps": 1}}, "tolerance: "),
    ({"tolerance": 4}, "tolerance 4: expected an object"),
])
def test_bad_spaces_are_option_errors(data, message):
    with pytest.raises(OptionError) as error:
        Space.from_dict(data, "space.json")
    assert message in str(error.value) and str(error.value).startswith("space.json: ")


def test_presets_and_files_agree(tmp_path, saxpy):  # noqa: F811
    record = write_record(tmp_path, saxpy)
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"preset": "standard", "opt_level": [2, 3]}))
    space = Space.load(path)
    standard = Space.preset("standard")
    assert space.opt_level == [2, 3] and space.codegen_opt == standard.codegen_opt
    assert space.blocks(record) == standard.blocks(record)
    assert Space.preset("compiler").blocks(record) == [(256, 1, 1)]
    described = standard.describe(record)
    assert described["points"] == standard.size(record) == len(standard.blocks(record)) * 3 * 3 * 3 * 2


def test_a_point_is_the_variant_it_names(tmp_path, saxpy):  # noqa: F811
    write_record(tmp_path, saxpy)
    point = Point(block=(128, 1, 1), grid=(32, 1, 1), opt_level=2, codegen_opt=1, maxrregcount=64,
                  specialize_args=True, specialize_dims=True, launch_bounds=True, min_blocks=2, recorded_launch=False)
    v = point.variant(True)
    assert (v.grid, v.block, v.args, v.specialize_grid, v.specialize_block, v.bounds) == \
        ((32, 1, 1), (128, 1, 1), "jit", True, True, (128, 2))
    assert (v.options.opt_level, v.options.codegen_opt, v.options.assembler_options) == \
        (2, 1, ("--maxrregcount=64",))
    assert Point.from_json(json.loads(json.dumps(point.to_json()))) == point
    assert point.variant(False).args == ()  # a record without runtime constants: nothing to specialize


def test_contraction_is_a_compiler_dimension(tmp_path, saxpy):  # noqa: F811
    """fp_contract (kir.jit.Options.fp_contract) is searched by the compiler and full
    presets; a point's choice reaches the variant's options and its JIT key."""
    record = write_record(tmp_path, saxpy)
    assert Space.preset("compiler").fp_contract == ["auto", "fast", "off"]
    assert Space.preset("full").fp_contract == ["auto", "fast", "on", "off"]
    assert Space.preset("quick").fp_contract == ["auto"]
    compiler = Space.preset("compiler")
    assert compiler.size(record) == 3 * 3 * 3 * 3 * 2 and compiler.describe(record)["fp_contract"] == ["auto", "fast",
                                                                                                        "off"]
    assert "fp_contract" not in Space.preset("quick").baseline_params(record)
    assert compiler.baseline_params(record)["fp_contract"] == "auto"  # what the JIT client compiles untuned
    fast = Point(block=(256, 1, 1), grid=(4, 1, 1), fp_contract="fast")
    assert fast.variant(True).options.fp_contract == "fast" and "fp-contract fast" in fast.describe()
    keys = {c: variant_jit_key(record, Point(block=(256, 1, 1), grid=(4, 1, 1), fp_contract=c).variant(True), "sm_90")
            for c in ("auto", "fast", "off")}
    assert len(set(keys.values())) == 3
    assert Point.from_json({k: v for k, v in fast.to_json().items() if k != "fp_contract"}).fp_contract == "auto"


# --- the search, over a stand-in executor -------------------------------------------------

@pytest.fixture
def recording(tmp_path, saxpy):  # noqa: F811
    write_record(tmp_path / "rec", saxpy)
    return tmp_path / "rec"


def check_report(out: dict, trials: int):
    (r,) = out["records"]
    assert r["recorded"]["median_ms"] == 1.0 and len(r["trials"]) == trials
    assert r["trials"][0]["point"]["recorded_launch"] and r["trials"][0]["point"]["opt_level"] == 3  # the first
    threads = 256
    measured = []
    for t in r["trials"]:
        status, ms = tune_fakes.model(t["point"], threads)
        assert t["result"]["median_ms"] == ms
        assert t["state"] == ("complete" if status == "ok" else "pruned"), t
        if status == "ok":
            measured.append((ms, t["number"], t))
    best = min(measured, key=lambda m: m[:2])
    assert r["best"]["trial"] == best[1] and r["best"]["median_ms"] == best[0]
    assert r["best"]["speedup"] == pytest.approx(1.0 / best[0])
    at_recorded = [m for m in measured if m[2]["point"]["recorded_launch"]]
    handed = min(at_recorded, key=lambda m: m[:2])
    assert r["handoff"]["trial"] == handed[1] and r["handoff"]["median_ms"] == handed[0]
    return r


def test_search_reports_the_best_and_hands_off_the_best_at_the_recorded_launch(recording, tmp_path):
    cache = tmp_path / "cache"
    result = cli("tune", recording, "--trials", "12", "--seed", "3", "--executor", "tune_fakes:modelled",
                 "--jit-cache", cache, "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["format"] == "kir.tune/1"
    r = check_report(out, 12)
    record = Record.load(r["record"])
    key = variant_jit_key(record, Variant(args="jit", options={}), "sm_90")
    assert r["handoff"]["key"] == key
    if r["handoff"]["median_ms"] < 1.0:
        assert r["handoff"]["stored"] and Cache(cache).lookup(key) is not None
        entry = Cache(cache).lookup(key)
        assert entry.meta["tuned.trial"] == str(r["handoff"]["trial"])
    text = cli("tune", recording, "--trials", "12", "--seed", "3", "--executor", "tune_fakes:modelled")
    assert text.returncode == 0, text.stderr
    assert f"best: trial {r['best']['trial']}, {r['best']['median_ms']:.4f} ms" in text.stdout
    assert f"hand-off to the JIT client: trial {r['handoff']['trial']}" in text.stdout


def test_same_seed_same_search(recording):
    runs = [json.loads(cli("tune", recording, "--trials", "8", "--seed", "11", "--executor", "tune_fakes:modelled",
                           "--json").stdout)["records"][0]["trials"] for _ in range(2)]
    assert [t["point"] for t in runs[0]] == [t["point"] for t in runs[1]]


def test_a_mismatching_variant_is_never_the_winner(recording):
    # Only 32-thread blocks and the recorded one: every 32-thread trial "differs".
    space = {"block": [[256, 1, 1], [32, 1, 1]], "opt_level": [2, 3]}
    out = json.loads(cli("tune", recording, "--trials", "6", "--seed", "1", "--executor", "tune_fakes:modelled",
                         "--space", _write(recording.parent / "s.json", space), "--json").stdout)
    r = out["records"][0]
    pruned = [t for t in r["trials"] if t["state"] == "pruned"]
    assert all(t["point"]["block"] == [32, 1, 1] and t["result"]["status"] == "mismatch" for t in pruned)
    assert r["best"]["point"]["block"] == [256, 1, 1]


def test_store_policies(recording, tmp_path):
    # A space whose only point is slower than the recorded code (O0 models at 1.2 ms).
    space = _write(tmp_path / "slow.json", {"opt_level": [0], "specialize_args": [False]})
    for policy, stored in (("better", False), ("always", True), ("never", False)):
        cache = tmp_path / f"cache-{policy}"
        out = json.loads(cli("tune", recording, "--trials", "1", "--executor", "tune_fakes:modelled", "--space",
                             space, "--jit-cache", cache, "--store", policy, "--json").stdout)
        h = out["records"][0]["handoff"]
        assert h["stored"] is stored and (cache.exists() and any(cache.rglob("*"))) is stored, (policy, h)
        if policy == "better":
            assert "not faster than the recorded code" in h["reason"]


def test_client_specialization_widens_the_handoff(recording, tmp_path):
    """Code with constant dims or launch bounds is handed off only to a client whose
    key covers the block (and grid); the key changes with it."""
    record = Record.load(next((recording / "records").glob("*.kirrec")))
    point = Point(block=(256, 1, 1), grid=(16, 1, 1), specialize_dims=True, launch_bounds=True, min_blocks=1)
    assert "does not cover" in Client().accepts(point)
    assert Client(True, True).accepts(point) is None
    assert "another launch configuration" in Client(True, True).accepts(
        Point(block=(128, 1, 1), grid=(32, 1, 1), recorded_launch=False))
    assert Client(True, True).key(record, "sm_90") == variant_jit_key(
        record, Variant(args="jit", specialize_grid=True, specialize_block=True, options={}), "sm_90")
    space = _write(tmp_path / "dims.json", {"specialize_dims": [True], "launch_bounds": [True], "min_blocks": [1]})
    plain = json.loads(cli("tune", recording, "--trials", "2", "--executor", "tune_fakes:modelled", "--space", space,
                           "--json").stdout)["records"][0]["handoff"]
    assert plain["trial"] is None and "may run" in plain["reason"]
    wide = json.loads(cli("tune", recording, "--trials", "2", "--executor", "tune_fakes:modelled", "--space", space,
                          "--client-specialize", "grid,block", "--json").stdout)["records"][0]["handoff"]
    assert wide["trial"] is not None and wide["key"] == Client(True, True).key(record, "sm_90")


@pytest.mark.parametrize("args, message", [
    (["--trials", "0"], "--trials 0"),
    (["--client-specialize", "warp"], "--client-specialize 'warp'"),
    (["--client-bounds", "x"], "--client-bounds 'x'"),
    (["--storage", "journal:"], "a file name is needed"),
])
def test_bad_options_exit_2(recording, args, message):
    result = cli("tune", recording, "--executor", "tune_fakes:modelled", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_damaged_record_exits_2_before_any_trial(recording, tmp_path):
    path = next((recording / "records").glob("*.kirrec"))
    bad = tmp_path / "bad.kirrec"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    result = cli("tune", bad, "--executor", "tune_fakes:modelled")
    assert result.returncode == 2 and "kir: error:" in result.stderr and "Traceback" not in result.stderr


# --- the hand-off, hit by the JIT client -------------------------------------------------

def axpy_ir(tmp_path) -> bytes:
    """The stub app's kernel (axpy) as clang-22's device IR, to tune from."""
    from build import CLANG, CLANG_CUDA  # tests/support/build.py (conftest puts it on the path)
    if shutil.which(CLANG) is None:
        pytest.skip("clang-22 is not installed")
    out = tmp_path / "axpy.bc"
    subprocess.run([*CLANG_CUDA, "--cuda-device-only", "-emit-llvm", "-c", "-O1",
                    str(TESTS / "fixtures" / "clang_cuda.cu"), "-o", str(out)], check=True)
    return out.read_bytes()


def axpy_record(rig, tmp_path, a: float = 2.5, name: str = "rec", ir: bytes | None = None) -> str:  # noqa: F811
    """A record of the JIT rig's stub app launching axpy (a = `a`, a runtime constant), with
    the kernel's IR to tune from (`ir`: other IR of it; also tests/tune/test_handoff.py's)."""
    import struct

    from saxpy_record import F32
    from stub_cuda import AXPY
    _, _, cubin, static = rig
    b = core.RecordBuilder(str(tmp_path / name))
    b.set_process(1, -1)
    b.set_device("stub", "sm_90", 0)
    b.set_kernel(AXPY, "axpy(float, float const*, float*, int)", core.Hash128.from_hex(static),
                 [0, 8, 16, 24], [4, 8, 8, 4])
    b.set_image("cubin", "sm_90", cubin.read_bytes())
    b.set_ir(ir if ir is not None else axpy_ir(tmp_path))
    b.set_jit_args([(1, "scalar", F32, False, 0, 0, 0)])
    args = [struct.pack("<f", a), bytes(8), bytes(8), struct.pack("<i", 64)]
    b.set_launch("cudaLaunchKernel", core.Hash128.from_hex("0" * 32), (1, 1, 1), (64, 1, 1), 16, 5, args, 0)
    return b.write()


def test_the_jit_client_runs_the_tuned_code(rig, tmp_path):  # noqa: F811
    """Record the stub app's launch (with IR), tune it (real kir.jit compiles, modelled
    times), and run the app under the JIT client with the cache: the launch is a hit,
    and the code it runs is the tuned trial's (the entry's metadata names it)."""
    from jit_rig import run_app
    path = axpy_record(rig, tmp_path)
    cache = tmp_path / "cache"
    space = _write(tmp_path / "space.json", {"preset": "compiler", "maxrregcount": [0, 64]})
    out = cli("tune", path, "--trials", "4", "--seed", "2", "--executor", "tune_fakes:compiled", "--space", space,
              "--jit-cache", cache, "--store", "always", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)["records"][0]
    assert r["handoff"]["stored"], r["handoff"]
    assert all(t["result"]["registers"] for t in r["trials"])  # compiled for real
    for t in r["trials"]:  # each step's compile time, and the constant memory the code uses (issue 24 §3)
        timings = t["result"]["compile_timings"]
        assert {"specialize", "optimize", "codegen"} <= set(timings) and all(v >= 0 for v in timings.values())
        assert t["result"]["constant_bytes"].get("cmem[0]", 0) > 0, t["result"]
        assert t["result"]["error_kind"] is None
    proc, stats = run_app(rig, cache, "r", tmp_path)
    assert stats["hits"] == 1 and stats["substituted"] == 1, stats
    entry = Cache(cache).lookup(r["handoff"]["key"])
    assert entry.meta["tuned.by"] == "kir tune" and entry.meta["tuned.trial"] == str(r["handoff"]["trial"])


from jit_rig import rig  # noqa: E402,F401  (the stub runtime and driver)

# --- across Dask workers -------------------------------------------------------------------

def test_trials_spread_over_workers_share_one_study(recording, tmp_path):
    pytest.importorskip("distributed")
    journal = tmp_path / "studies.journal"
    out = cli("tune", recording, "--trials", "10", "--seed", "5", "--executor", "tune_fakes:modelled",
              "--workers", "2", "--storage", f"journal:{journal}", "--json", timeout=600)
    assert out.returncode == 0, out.stderr
    r = check_report(json.loads(out.stdout), 10)
    workers = {t["worker"] for t in r["trials"]}
    assert len(workers) == 2, workers  # both workers ran trials of the one study
    assert journal.stat().st_size > 0
    # The study continues where it stopped: 3 more trials, 13 in all, nothing re-run.
    more = json.loads(cli("tune", recording, "--trials", "3", "--executor", "tune_fakes:modelled", "--storage",
                          f"journal:{journal}", "--json").stdout)["records"][0]
    assert len(more["trials"]) == 13 and more["trials"][:10] == r["trials"]


def test_a_worker_that_dies_fails_its_trials_not_the_run(recording, tmp_path):
    pytest.importorskip("distributed")
    journal = tmp_path / "studies.journal"
    space = _write(tmp_path / "s.json", {"opt_level": [1]})  # every trial os._exit()s its process
    out = cli("tune", recording, "--trials", "2", "--executor", "tune_fakes:modelled", "--workers", "2",
              "--space", space, "--storage", f"journal:{journal}", "--json", env={"TUNE_FAKE_CRASH": "1"},
              timeout=600)
    assert out.returncode == 1, out.stderr  # no verified trial
    assert "Traceback" not in out.stderr


def test_a_study_run_with_another_space_is_not_continued_unless_asked(recording, tmp_path):
    """The same storage, another space: a new study starts (warned, named by the settings);
    the same space again continues that one; --resume continues the first one anyway."""
    journal = f"journal:{tmp_path / 'studies.journal'}"

    def run(*extra):
        out = cli("tune", recording, "--trials", "2", "--seed", "1", "--executor", "tune_fakes:modelled",
                  "--storage", journal, "--json", *extra)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)["records"][0], out.stderr

    first, err = run()
    assert len(first["trials"]) == 2 and first.get("warnings", []) == [] and "warning" not in err
    other = _write(tmp_path / "other.json", {"opt_level": [1, 2]})
    second, err = run("--space", other)
    assert second["study"].startswith(first["study"] + "-") and second["study"] != first["study"]
    assert len(second["trials"]) == 2 and all(t["point"]["opt_level"] in (1, 2) for t in second["trials"][1:])
    assert "another space or options: starting study " + second["study"] in err
    assert second["warnings"] and "--resume" in second["warnings"][0]
    again, err = run("--space", other)  # the new study's own settings: continued, nothing said
    assert again["study"] == second["study"] and len(again["trials"]) == 4 and "warning" not in err
    # --resume continues the first study: with more repeats (the same dimensions), or not at all
    # when a dimension's choices differ from the study's (Optuna cannot mix them): exit 2, said.
    repeats = _write(tmp_path / "repeats.json", {"preset": "standard", "repeat": 7})
    forced, err = run("--space", repeats, "--resume")
    assert forced["study"] == first["study"] and len(forced["trials"]) == 4
    assert "continued as asked (--resume)" in err and forced["trials"][-1]["point"]["repeat"] == 7
    refused = cli("tune", recording, "--trials", "2", "--executor", "tune_fakes:modelled", "--storage", journal,
                  "--space", other, "--resume")
    assert refused.returncode == 2 and "cannot continue with this space" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


def test_trial_process_reports_what_stopped_it(recording):
    """The replay process's errors come back as the trial's result: a record that is
    not there is a deterministic error (the process stays); without a GPU the
    device error ends the process, and the next trial starts another."""
    from kir.tune.trial import TrialProcess
    path = str(next((recording / "records").glob("*.kirrec")))
    with TrialProcess() as process:
        recorded = Space.preset("standard").recorded()
        missing = process.run(path + ".absent", recorded)
        assert missing["status"] == "error" and ".absent" in missing["error"]
        first = process.proc
        assert first is not None and first.poll() is None  # kept
        result = process.run(path, recorded)
        if result["status"] == "ok":
            pytest.skip("a GPU is present: tests/tune/test_tune_gpu.py covers it")
        assert result["status"] == "error" and "device" in result["error"].lower(), result
        assert process.proc is None and first.poll() is not None  # ended: the next trial gets a fresh one


def test_trial_process_never_imports_a_kir_from_the_current_directory(recording, tmp_path, monkeypatch):
    """The trial child ran `python -m kir.tune.trial`, which puts the current directory
    first on sys.path: a `kir/` planted there ran in the child (issue 21)."""
    from kir.tune.trial import TrialProcess
    planted = tmp_path / "kir"
    planted.mkdir()
    marker = tmp_path / "planted-ran"
    (planted / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    path = str(next((recording / "records").glob("*.kirrec")))
    with TrialProcess() as process:
        result = process.run(path + ".absent", Space.preset("standard").recorded())
    assert result["status"] == "error" and ".absent" in result["error"], result
    assert not marker.exists()


# --- verification with a tolerance (issue 24 §2) -------------------------------------------

def test_contracted_trials_are_verified_within_a_ulp_tolerance(recording):
    """Contraction moves every output element (tune_fakes.contracted: fast 2 ulp, on/off
    1 ulp; auto none); fast is the fastest. Bitwise, every contracted trial is a
    mismatch and the best is an uncontracted one; with --ulp 2 they are verified
    (with by how much) and fast wins; with --ulp 1 fast is still pruned."""
    args = ("tune", recording, "--preset", "compiler", "--trials", "30", "--seed", "4", "--executor",
            "tune_fakes:contracted", "--json")

    def search(*extra):
        (r,) = json.loads(cli(*args, *extra).stdout)["records"]
        by_contract = {}
        for t in r["trials"]:
            by_contract.setdefault(t["point"]["fp_contract"], set()).add(t["result"]["status"])
        return r, by_contract

    bitwise, seen = search()
    assert seen["auto"] == {"ok"} and seen["fast"] == {"mismatch"} and seen["off"] == {"mismatch"}
    assert bitwise["best"]["point"]["fp_contract"] == "auto"
    mismatch = next(t for t in bitwise["trials"] if t["result"]["status"] == "mismatch")["result"]["mismatches"][0]
    assert mismatch["max_ulp"] is None  # bitwise: not measured
    within, seen = search("--ulp", "2")
    assert seen == {"auto": {"ok"}, "fast": {"ok"}, "off": {"ok"}}
    assert within["best"]["point"]["fp_contract"] == "fast" and within["best"]["median_ms"] == 0.7
    fast = next(t for t in within["trials"] if t["point"]["fp_contract"] == "fast")
    differences = fast["result"]["differences"]  # every snapshotted region (x and y), by how much
    assert differences and all(d["within"] and d["max_ulp"] == 2 and d["ulp_limit"] == 2 for d in differences)
    assert fast["point"]["tolerance"]["ulp"] == 2
    tight, seen = search("--ulp", "1")
    assert seen["fast"] == {"mismatch"} and seen["off"] == {"ok"}
    assert tight["best"]["point"]["fp_contract"] == "off"
