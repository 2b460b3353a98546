"""`kir tune`'s counterparts of Mneme's launch and space options (issue 24 §3,
docs/tune.md "Mneme's options"): --launch-dim x|xy|xyz, --adaptive-invalid-ban,
--max-threads-range / --max-threads-policy, --space-module / --space-arg, YAML
configs. No GPU: trials run over tests/support/tune_fakes.py's executors (the record
read and each variant resolved for real, the time from its model)."""
from __future__ import annotations

import json

import pytest

from saxpy_record import saxpy, write_record  # noqa: F401  (the saxpy fixture)
from tune_fakes import cli


@pytest.fixture
def recording(tmp_path, saxpy):  # noqa: F811
    write_record(tmp_path / "rec", saxpy)
    return tmp_path / "rec"


@pytest.fixture
def recording_2d(tmp_path, saxpy):  # noqa: F811
    """The same work launched as a 2-D grid 4x4 of 16x16 blocks."""
    write_record(tmp_path / "rec2d", saxpy, grid=(4, 4, 1), block=(16, 16, 1))
    return tmp_path / "rec2d"


def tune_json(*args, env=None) -> dict:
    result = cli("tune", *map(str, args), "--json", env=env)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def blocks_of(recording, *args) -> list[tuple[int, int, int]]:
    result = cli("tune", recording, "--preset", "launch", *args, "--print-space")
    assert result.returncode == 0, result.stderr
    return [tuple(b) for b in json.loads(result.stdout)["records"][0]["space"]["block"]]


# --- --launch-dim x|xy|xyz (Mneme's builtin_spaces.py _active_axes) ---------------------------

def test_launch_dim_restricts_the_axes_searched(recording_2d):
    auto = blocks_of(recording_2d)
    x = blocks_of(recording_2d, "--launch-dim", "x")
    xy = blocks_of(recording_2d, "--launch-dim", "xy")
    xyz = blocks_of(recording_2d, "--launch-dim", "xyz")
    assert auto[0] == x[0] == xy[0] == xyz[0] == (16, 16, 1)  # the recorded block first
    # x: only x varies, y and z stay as recorded
    assert {b[1:] for b in x} == {(16, 1)} and len({b[0] for b in x}) > 2
    # xy: the axes the launch uses, as auto finds them on this 2-D launch
    assert sorted(xy) == sorted(auto) and len({b[1] for b in xy}) > 2 and {b[2] for b in xy} == {1}
    # xyz: z too, although the launch does not use it
    assert {b[2] for b in xyz} > {1} and set(xy) < set(xyz)
    assert set(x) < set(xy)
    # the thread budget holds on every axis chosen (balanced: twice the recorded 256)
    assert all(b[0] * b[1] * b[2] <= 1024 for b in xyz)


def test_launch_dim_xy_on_a_1d_launch_varies_y(recording):
    auto = blocks_of(recording)
    xy = blocks_of(recording, "--launch-dim", "xy")
    assert {b[1] for b in auto} == {1} and len({b[1] for b in xy}) > 1
    assert {b[2] for b in xy} == {1}


def test_launch_dim_x_samples_only_x_blocks(recording_2d):
    out = tune_json(recording_2d, "--preset", "launch", "--launch-dim", "x", "--sampler", "random", "--trials",
                    "8", "--seed", "3", "--executor", "tune_fakes:modelled")
    (r,) = out["records"]
    assert len(r["trials"]) == 8
    for t in r["trials"]:
        block, grid = t["point"]["block"], t["point"]["grid"]
        assert block[1:] == [16, 1] and grid[1:] == [4, 1]  # y keeps the recorded block and grid
        assert grid[0] == -(-64 // block[0])  # x covers the recorded work (16 x 4)
    assert len({t["point"]["block"][0] for t in r["trials"]}) > 1
    assert r["space"]["launch_dim"] == "x"


def test_launch_dim_in_a_space_file(recording_2d, tmp_path):
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"preset": "launch", "launch_dim": "x"}))
    result = cli("tune", recording_2d, "--space", space, "--print-space")
    assert result.returncode == 0, result.stderr
    assert {tuple(b[1:]) for b in json.loads(result.stdout)["records"][0]["space"]["block"]} == {(16, 1)}
    space.write_text(json.dumps({"preset": "launch", "launch_dim": "yz"}))
    bad = cli("tune", recording_2d, "--space", space, "--print-space")
    assert bad.returncode == 2 and "launch_dim 'yz': expected auto, x, xy, xyz" in bad.stderr


# --- --adaptive-invalid-ban (Mneme's TuningSession._banned_block_shapes) ----------------------

BAN = ("--preset", "launch", "--launch-safety", "aggressive", "--codegen-opt-range", "1:3", "--sampler", "random",
       "--trials", "20", "--seed", "5", "--executor", "tune_fakes:launch_fails")


def test_a_block_that_failed_to_launch_is_banned(recording):
    """tune_fakes.launch_fails: blocks of 1024 threads fail to launch. Banned, the block
    runs once; the later samples of it are skipped (not run, not counted as trials) and
    reported; without the ban it is run again at other codegen levels."""
    banned = tune_json(recording, *BAN)["records"][0]
    free = tune_json(recording, *BAN, "--no-adaptive-invalid-ban")["records"][0]
    big = [t for t in banned["trials"] if t["point"]["block"] == [1024, 1, 1]]
    assert len(big) == 1 and big[0]["result"]["error_kind"] == "launch"
    assert len(banned["trials"]) == 20  # 20 trials run, the skipped samples besides
    assert banned["banned_blocks"] == [[1024, 1, 1]]
    assert banned["skipped_counts"]["banned"] == len(banned["skipped"]) > 0
    assert all(s["point"]["block"] == [1024, 1, 1] and s["skipped"] == "banned" and
               f"failed to launch in trial {big[0]['number']}" in s["result"]["error"] for s in banned["skipped"])
    # without the ban: the block is launched (run, not a repeat) at several codegen levels
    free_big = [t for t in free["trials"] if t["point"]["block"] == [1024, 1, 1]]
    assert len({t["point"]["codegen_opt"] for t in free_big}) > 1 and free["skipped"] == []
    assert free["skipped_counts"] == {"banned": 0, "invalid": 0}
    # the table says it too
    text = cli("tune", recording, *BAN)
    assert f"skipped samples (not run): {banned['skipped_counts']['banned']} of banned blocks (1024x1x1)" in text.stdout


# --- --max-threads-range / --max-threads-policy (Mneme's BuiltinTuneSearchSpace._max_threads) --

BOUNDS = ("--preset", "compiler", "--fixed-passes", "default<O3>", "--fixed-codegen-opt", "3",
          "--fixed-fp-contract", "auto", "--specialize-space", "on", "--launch-bounds-space", "on")


def space_of(recording, *args) -> dict:
    result = cli("tune", recording, *BOUNDS, *args, "--print-space")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["records"][0]["space"]


def test_max_threads_choices_by_range_and_policy(recording):
    assert space_of(recording)["max_threads"] == [0]  # today's: the block's threads
    assert space_of(recording, "--max-threads-policy", "recorded")["max_threads"] == [256]
    assert space_of(recording, "--max-threads-policy", "hardware")["max_threads"] == [1024]
    assert space_of(recording, "--max-threads-policy", "powers-of-two")["max_threads"] == [64, 128, 256, 512, 1024]
    ranged = space_of(recording, "--max-threads-range", "128:512:128", "--max-threads-policy", "hardware")
    assert ranged["max_threads"] == [128, 256, 384, 512]  # a range wins over the policy (Mneme's)
    assert ranged["points"] == 3 * 4  # register caps x max threads
    bad = cli("tune", recording, *BOUNDS, "--max-threads-range", "0:2048", "--print-space")
    assert bad.returncode == 2 and "--max-threads-range '0:2048': expected 1 <= LOW <= HIGH <= 1024" in bad.stderr


def test_a_bound_below_the_block_is_skipped_before_compiling(recording):
    """Every point of the grid: those whose max threads (128) is below the recorded block's
    256 threads are skipped as invalid (never sent to the executor), the others run with
    their bound."""
    r = tune_json(recording, *BOUNDS, "--max-threads-range", "128:512:128", "--sampler", "exhaustive",
                  "--executor", "tune_fakes:compiled")["records"][0]
    run = [t["point"] for t in r["trials"]]
    assert sorted((p["max_threads"], p["maxrregcount"]) for p in run[1:]) == \
        sorted((m, c) for m in (256, 384, 512) for c in (0, 64, 128))
    assert all(t["state"] == "complete" and t["result"]["registers"] for t in r["trials"])
    skipped = r["skipped"]
    assert r["skipped_counts"] == {"banned": 0, "invalid": 3} and len(skipped) == 3
    assert {s["point"]["max_threads"] for s in skipped} == {128}
    assert all("launch bounds of 128 threads below the block's 256" in s["result"]["error"] for s in skipped)
    assert any(t["description"].endswith("bounds 512,0") for t in r["trials"])


def test_the_jit_compiles_the_bound_asked(recording):
    """kir.jit honours the point's max threads: the code's .maxntid is it (and the block's
    threads under the default policy)."""
    import dataclasses

    from kir.record import Record
    from kir.replay.variant import compile_variant
    from kir.tune.space import Point
    record = Record.load(next((recording / "records").glob("*.kirrec")))
    for max_threads, expected in ((512, 512), (0, 256)):
        point = Point(block=(256, 1, 1), grid=(16, 1, 1), launch_bounds=True, min_blocks=2, max_threads=max_threads)
        variant = point.variant(True)
        assert variant.bounds == (expected, 2)
        variant.options = dataclasses.replace(variant.options, kind="ptx")
        ptx = compile_variant(record, variant, "sm_90").code.decode()
        assert f".maxntid {expected}" in ptx and ".minnctapersm 2" in ptx


# --- --space-module / --space-arg (Mneme's load_custom_space and SearchSpace protocol) --------

PLUGIN = str(__import__("pathlib").Path(__file__).with_name("space_plugin.py")) + ":BlockLevels"


def test_a_space_module_drives_the_search(recording):
    args = ("--space-module", PLUGIN, "--space-arg", "threads=[128, 256, 512]", "--space-arg", "max_product=600",
            "--iterations", "3")
    space = json.loads(cli("tune", recording, *args, "--print-space").stdout)["records"][0]["space"]
    assert space["dimensions"] == {"threads": [128, 256, 512], "level": [1, 2, 3], "regs": [0, 64, 128]}
    assert space["module_args"] == {"threads": [128, 256, 512], "max_product": 600}
    assert space["points"] == 27 and space["repeat"] == 3
    r = tune_json(recording, *args, "--sampler", "exhaustive", "--executor", "tune_fakes:modelled")["records"][0]
    first = r["trials"][0]["point"]
    assert first["params"] == {"threads": 256, "level": 1, "regs": 0}  # baseline()
    assert (first["block"], first["opt_level"], first["grid"]) == ([256, 1, 1], 1, [16, 1, 1])
    for t in r["trials"]:
        p = t["point"]
        # derived(): the block and options from the params, the grid covering the work
        assert p["block"] == [p["params"]["threads"], 1, 1] and p["opt_level"] == p["params"]["level"]
        assert p["maxrregcount"] == p["params"]["regs"] and p["grid"] == [4096 // p["block"][0], 1, 1]
        assert p["repeat"] == 3 and p["params"]["threads"] * p["params"]["level"] <= 600
    ran = {(t["point"]["params"]["threads"], t["point"]["params"]["level"], t["point"]["params"]["regs"])
           for t in r["trials"][1:]}
    allowed = {(a, b, c) for a in (128, 256, 512) for b in (1, 2, 3) for c in (0, 64, 128) if a * b <= 600}
    assert ran == allowed
    # constraints(): the refused points skipped as invalid, never run
    refused = [s["point"]["params"] for s in r["skipped"]]
    assert r["skipped_counts"]["invalid"] == len(refused) == 27 - len(allowed)
    assert all(p["threads"] * p["level"] > 600 for p in refused)
    assert r["trials"][1]["description"].startswith("threads ")
    # the best trial is the model's best of what ran
    import math

    import tune_fakes
    assert r["best"]["median_ms"] == min(tune_fakes.model(t["point"], 256)[1] for t in r["trials"])
    assert math.isfinite(r["best"]["median_ms"])


@pytest.mark.parametrize("args, message", [
    (("--space-module", "no_such_module_here:Space"), "--space-module no_such_module_here:Space: cannot import"),
    (("--space-module", PLUGIN.replace(":BlockLevels", ":Nope")), "has no class Nope"),
    (("--space-module", "/nonexistent/space.py:S"), "/nonexistent/space.py: no such file"),
    (("--space-module", PLUGIN, "--space-arg", "novalue"), "--space-arg 'novalue': expected KEY=VALUE"),
    (("--space-module", PLUGIN, "--space-arg", "bogus=1"), "unexpected keyword argument 'bogus'"),
    (("--space-arg", "threads=[1]"), "--space-arg: only with --space-module"),
])
def test_bad_space_modules_exit_2(recording, args, message):
    result = cli("tune", recording, *args, "--print-space")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


def test_a_space_module_that_raises_is_one_line(recording):
    result = cli("tune", recording, "--space-module", PLUGIN, "--space-arg", "fail_at=128", "--sampler", "exhaustive",
                 "--executor", "tune_fakes:modelled")
    assert result.returncode == 2, result.stdout
    assert "derived(): ValueError: no variant for 128 threads" in result.stderr and "Traceback" not in result.stderr


# --- YAML configs (Mneme's session.py _load_config_file) -------------------------------------

def test_yaml_config_round_trip(recording, tmp_path):
    yaml = pytest.importorskip("yaml")  # Optuna's dependency: installed with the tune extra
    config = tmp_path / "tune.yaml"
    args = ("--preset", "launch", "--launch-dim", "x", "--sampler", "random", "--metric", "max", "--trials", "5",
            "--max-threads-policy", "powers-of-two", "--no-adaptive-invalid-ban")
    result = cli("tune", recording, *args, "--dump-config", config)
    assert result.returncode == 0, result.stderr
    text = config.read_text()
    assert not text.lstrip().startswith("{")  # YAML by the extension, not JSON
    data = yaml.safe_load(text)
    assert data["schema"] == "kir.tune-config/1" and data["launch_dim"] == "x" and data["trials"] == 5
    assert data["adaptive_invalid_ban"] is False and data["max_threads_policy"] == "powers-of-two"
    direct = json.loads(cli("tune", recording, *args, "--dry-run", "--json").stdout)["records"][0]
    loaded = cli("tune", recording, "--config", config, "--dry-run", "--json")
    assert loaded.returncode == 0, loaded.stderr
    assert json.loads(loaded.stdout)["records"][0] == direct
    # a YAML written by hand, with a comment; the command line wins
    config.write_text("# mine\nsampler: grid\nmetric: min\nlaunch_dim: xy\n")
    mine = json.loads(cli("tune", recording, "--config", config, "--metric", "mean", "--dry-run",
                          "--json").stdout)["records"][0]
    assert (mine["sampler"], mine["metric"], mine["space"]["launch_dim"]) == ("grid", "mean", "xy")
    config.write_text("sampler: [grid\n")
    bad = cli("tune", recording, "--config", config, "--print-space")
    assert bad.returncode == 2 and f"--config {config}: line 2" in bad.stderr and "not YAML" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize("text, message", [
    ("trials: 2020-01-01\n", "trials datetime.date(2020, 1, 1): expected an integer"),
    ("trials: '5'\n", "trials '5': expected an integer"),
    ("sampler: annealing\n", "sampler 'annealing': expected one of tpe, random"),
    ("passes: default<O2>\n", "passes 'default<O2>': expected a list of strings"),
    ("adaptive_invalid_ban: 0\n", "adaptive_invalid_ban 0: expected true or false"),
    ("- a list\n", "expected an object of options"),
])
def test_bad_yaml_config_values_exit_2(recording, tmp_path, text, message):
    pytest.importorskip("yaml")
    config = tmp_path / "bad.yml"
    config.write_text(text)
    result = cli("tune", recording, "--config", config, "--print-space")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr
