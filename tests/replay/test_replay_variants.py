"""Replay variants (kir.replay.variant, issue 13 §1): a variant's validation, its JIT
key (against kir.hashing.jit_key, the key's other encoding path, and against the
JIT client's key on a GPU), its code compiled from a record's IR with the
specialization visible in the PTX, a record holding IR but no image, and
`kir replay --plan` for a variant. The records are written with the C++ record
writer (kir._core.RecordBuilder) around the real kernel of the rec_clang_ir
fixture (clang's device IR embedded as the Proteus pass does, and nvcc's cubin);
GPU tests replay real recordings and skip here."""
from __future__ import annotations

import json
import re
import struct
import subprocess

import pytest

import kir._core as core
from kir import hashing
from kir.errors import OptionError, PlanError
from kir.jit import Options
from kir.record import Record
from kir.replay import Variant, compile_variant, plan, resolve, variant_jit_key
from running import run_kir
from saxpy_record import F32, SAXPY, A, N, X, Y, saxpy, write_record  # noqa: F401  (saxpy: fixture)


@pytest.fixture
def record(tmp_path, saxpy):
    return write_record(tmp_path, saxpy)


# --- the Variant itself --------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"grid": (0, 1, 1)}, "grid"),
    ({"block": (1, 2)}, "block"),
    ({"shared_bytes": -1}, "shared_bytes"),
    ({"args": ["x"]}, "POS or POS:TYPE"),
    ({"args": [1, "1:f32"]}, "given twice"),
    ({"args": ["2:float"]}, "unknown type"),
    ({"args": [0]}, "1-based"),
    ({"bounds": (2048, 1)}, "max threads"),
    ({"options": {"opt": 3}}, "unknown key"),
    ({"options": {"opt_level": 5}}, "opt_level"),
    ({"repeat": 0}, "repeat"),
    ({"warmup": -1}, "warmup"),
    ({"tolerance": 0.1}, "tolerance"),
])
def test_bad_variants_are_option_errors(kwargs, message):
    with pytest.raises(OptionError, match=message):
        Variant(**kwargs)


def test_what_needs_compiling():
    assert not Variant().needs_compile
    assert not Variant(grid=(8, 1, 1), block=(128, 1, 1), shared_bytes=1024).needs_compile
    for v in (Variant(args="jit"), Variant(args=[1]), Variant(specialize_block=True), Variant(bounds=256),
              Variant(options={})):
        assert v.needs_compile, v
    assert Variant(bounds=256).bounds == (256, 0)
    assert Variant(options={"opt_level": 2}).options == Options(opt_level=2)


def test_launch_defaults_to_the_recorded_one(record):
    assert Variant().launch(record) == ((16, 1, 1), (256, 1, 1), 0)
    assert Variant(grid=64, block=(128, 1, 1), shared_bytes=512).launch(record) == ((64, 1, 1), (128, 1, 1), 512)
    r = resolve(record, Variant(block=(128, 1, 1)))
    assert r.specialization is None and variant_jit_key(record, r, "sm_90") is None
    assert compile_variant(record, r, "sm_90") is None


# --- the JIT key ---------------------------------------------------------------------

def test_key_matches_kir_hashing_jit_key(record, saxpy):
    """jit_key_of_launch over the recorded argument bytes and the record's jit_args
    (the client's path) equals kir.hashing.jit_key over the values (the other path)."""
    a = struct.pack("<f", A)
    cases = [
        (Variant(args="jit"), dict(args=[(1, F32, a)])),
        (Variant(args=[1], specialize_block=True, block=(128, 1, 1)),
         dict(args=[(1, F32, a)], block=(128, 1, 1))),
        (Variant(args=["4:i32"], specialize_grid=True, shared_bytes=64, bounds=(256, 2)),
         dict(args=[(4, hashing._type("i32"), struct.pack("<i", N))], grid=(16, 1, 1), shared_bytes=64,
              bounds=(256, 2))),
        (Variant(options={"opt_level": 1, "assembler_options": ("--maxrregcount=32",)}),
         dict(args=[], config=Options(opt_level=1, assembler_options=("--maxrregcount=32",)).config())),
    ]
    keys = set()
    for variant, expected in cases:
        expected.setdefault("config", Options().config())
        key = variant_jit_key(record, variant, "sm_90")
        assert key == hashing.jit_key(saxpy["static"], "sm_90", **expected), variant
        keys.add(key)
    assert len(keys) == len(cases)
    assert variant_jit_key(record, Variant(args="jit"), "sm_100") != variant_jit_key(record, Variant(args="jit"),
                                                                                     "sm_90")


def test_array_read_through_its_pointer_enters_the_key_by_value(tmp_path, saxpy):
    record = write_record(tmp_path, saxpy, array=True)
    v = Variant(args="jit")
    r = resolve(record, v)
    x = record.prologue(next(r for r in record.allocations if r.address == X))
    assert [a.value.position for a in r.args] == [1, 2]
    assert r.args[1].value.type == "bytes" and r.args[1].value.value == x and r.args[1].pointer == X
    expected = hashing.jit_key(saxpy["static"], "sm_90", [(1, F32, struct.pack("<f", A)), (2, F32, x)],
                               config=Options().config())
    assert variant_jit_key(record, v, "sm_90") == expected


def test_key_agrees_with_the_compiled_kernels_key_inputs(record):
    """For scalars, kir.jit.jit_key(compiled) (key_inputs) is the same key."""
    import kir.jit
    v = Variant(args="jit", specialize_block=True, options={"kind": "ptx"})
    compiled = compile_variant(record, v, "sm_90")
    assert kir.jit.jit_key(compiled) == variant_jit_key(record, v, "sm_90")


def test_an_arrays_key_agrees_with_the_compiled_kernels_key_inputs(tmp_path, saxpy):
    """An array, specialized as bytes, is keyed by kir.jit as kir_jit_key keys it (its
    element type: ArgValue.key_type), so kir.jit.jit_key(compiled) is the variant's key."""
    import kir.jit
    record = write_record(tmp_path, saxpy, array=True)
    v = Variant(args="jit", options={"kind": "ptx"})
    compiled = compile_variant(record, v, "sm_90")
    assert compiled.specialization.args[1].type == "bytes"
    assert kir.jit.jit_key(compiled) == variant_jit_key(record, v, "sm_90")


def test_unannotated_argument_needs_a_type(record):
    with pytest.raises(OptionError, match="argument 4 .* POS:TYPE"):
        resolve(record, Variant(args=[4]))
    with pytest.raises(OptionError, match="4 bytes, a f64 is 8"):
        resolve(record, Variant(args=["1:f64"]))
    with pytest.raises(OptionError, match="takes 4 parameters"):
        resolve(record, Variant(args=["9:i32"]))
    with pytest.raises(OptionError, match="at most 128 threads per block, the launch has 256"):
        resolve(record, Variant(bounds=128))
    assert resolve(record, Variant(bounds=128, block=(128, 1, 1))).specialization.bounds == (128, 0)


def test_jit_args_needs_annotations(tmp_path, saxpy):
    record = write_record(tmp_path, saxpy, jit_args=False)
    with pytest.raises(OptionError, match="no runtime-constant arguments"):
        resolve(record, Variant(args="jit"))


# The reference JIT client itself, without a GPU: the stub runtime and driver of
# tests/jit/test_jit_client.py, whose app launches axpy(2.5, x, y, 64) with 16 bytes of
# dynamic shared memory and `a` registered as a runtime constant (Proteus ABI).
from jit_rig import rig, run_app  # noqa: E402,F401 - the rig is a fixture

AXPY = "_Z4axpyfPKfPfi"


def axpy_record(directory, rig) -> Record:
    """The stub app's launch as the recorder files it: the same kernel (static hash
    of the sm_90 cubin), arguments, shared memory and runtime-constant argument."""
    d, fatbin, cubin, static = rig
    b = core.RecordBuilder(str(directory))
    b.set_process(1, -1)
    b.set_device("stub", "sm_90", 0)
    b.set_kernel(AXPY, "axpy(float, float const*, float*, int)", core.Hash128.from_hex(static),
                 [0, 8, 16, 24], [4, 8, 8, 4])
    b.set_image("cubin", "sm_90", cubin.read_bytes())
    b.set_jit_args([(1, "scalar", F32, False, 0, 0, 0)])
    args = [struct.pack("<f", 2.5), bytes(8), bytes(8), struct.pack("<i", 64)]
    b.set_launch("cudaLaunchKernel", core.Hash128.from_hex("0" * 32), (1, 1, 1), (64, 1, 1), 16, 5, args, 0)
    return Record.load(b.write())


@pytest.mark.parametrize("options", [None, {"opt_level": 2}], ids=["defaults", "O2"])
def test_key_is_the_one_the_jit_client_computes(rig, tmp_path, options):
    """The client misses on an empty cache and reports the launch's key: the
    variant specializing the record's runtime-constant arguments with the same
    compile options has that key (no IR is needed to compute it); stored under it,
    the app's next launch is a hit."""
    from kir.cache import Cache
    record = axpy_record(tmp_path / "rec", rig)
    cache = tmp_path / "cache"
    opts = Options.coerce(options)
    proc, stats = run_app(rig, cache, "r", tmp_path, options=opts)
    assert stats["misses"] == 1
    (missed,) = stats["missed"]
    key = variant_jit_key(record, Variant(args="jit", options=options), "sm_90")
    assert key == missed["key"]
    assert variant_jit_key(record, Variant(args="jit", options={"opt_level": 1}), "sm_90") != key
    assert variant_jit_key(record, Variant(args="jit", options=options, shared_bytes=0), "sm_90") != key
    Cache(cache).store(key, rig[2].read_bytes(), "cubin", "sm_90")
    proc, stats = run_app(rig, cache, "r", tmp_path, options=opts)
    assert stats["hits"] == 1 and stats["substituted"] == 1


# --- the code ------------------------------------------------------------------------

def entry(ptx: str) -> str:
    return ptx[ptx.index(f".entry {SAXPY}("):]


def test_compiled_from_the_records_ir_with_the_specialization_visible(record):
    plain = compile_variant(record, Variant(options={"kind": "ptx"}), "sm_90").ptx
    special = compile_variant(record, Variant(args="jit", specialize_block=True, bounds=(256, 1),
                                              options={"kind": "ptx"}), "sm_90").ptx
    a_bits = f"0f{struct.unpack('<I', struct.pack('<f', A))[0]:08X}"
    assert "ld.param.b32" in entry(plain) or "ld.param.f32" in entry(plain)
    assert "%ntid.x" in entry(plain)
    body = entry(special)
    assert a_bits in body and "saxpyfPKfPfi_param_0]" not in body  # a folded, never loaded
    assert "%ntid.x" not in body                                       # blockDim.x is 256
    assert re.search(r"\.maxntid 256\b", body) and ".minnctapersm 1" in body


def test_cubin_and_resources(record, cuobjdump, tmp_path):
    compiled = compile_variant(record, Variant(args="jit"), "sm_90")
    assert compiled.kind == "cubin" and compiled.code[:4] == b"\x7fELF"
    assert compiled.resources.registers and compiled.resources.code_bytes
    path = tmp_path / "v.cubin"
    path.write_bytes(compiled.code)
    out = subprocess.run([cuobjdump, "-res-usage", str(path)], capture_output=True, text=True, check=True).stdout
    assert f"REG:{compiled.resources.registers}" in out


def test_a_variant_without_ir_is_refused(record, tmp_path, saxpy):
    b = core.RecordBuilder(str(tmp_path / "noir"))
    b.set_process(1, -1)
    b.set_device("NVIDIA H200", "sm_90", 0)
    b.set_kernel(SAXPY, "saxpy", core.Hash128.from_hex(saxpy["static"]), [0, 8, 16, 24], [4, 8, 8, 4])
    b.set_image("cubin", "sm_90", saxpy["cubin"])
    args = [struct.pack("<f", A), X.to_bytes(8, "little"), Y.to_bytes(8, "little"), struct.pack("<i", N)]
    b.set_launch("cudaLaunchKernel", core.Hash128.from_hex("0" * 32), (1, 1, 1), (1, 1, 1), 0, 0, args, 0)
    bare = Record.load(b.write())
    assert resolve(bare, Variant(block=(64, 1, 1))).specialization is None  # a launch variant needs no IR
    with pytest.raises(PlanError, match="holds none"):
        resolve(bare, Variant(options={}))


# --- a record holding IR but no image ------------------------------------------------

def test_record_with_ir_only_plans_from_its_ir(tmp_path, saxpy):
    record = write_record(tmp_path, saxpy, image=False)
    assert record.kernel.image is None
    p = plan(record)
    assert p.code.kind == "ir" and "no device image" in p.code.reason
    assert p.hashes.static == saxpy["static"] and p.hashes_match, p.notes
    assert ".entry _Z5saxpyfPKfPfi(" in p.code_bytes().decode()
    for code in ("cubin", "ptx"):
        with pytest.raises(PlanError, match="no device image .* use --code ir"):
            plan(record, code)
    result = run_kir("replay", "--plan", record.path)
    assert result.returncode == 0, result.stderr
    assert "code      ir:" in result.stdout
    result = run_kir("replay", "--plan", "--code", "cubin", record.path)
    assert result.returncode == 2 and "use --code ir" in result.stderr


# --- kir replay --plan for a variant -------------------------------------------------

def test_plan_of_a_variant(record):
    result = run_kir("replay", "--plan", "--json", "--specialize", "jit", "--specialize-dims", "block",
                     "--block", "128,1,1", "-O", "2", record.path)
    assert result.returncode == 0, result.stderr
    v = json.loads(result.stdout)["variant"]
    expected = Variant(block=(128, 1, 1), args="jit", specialize_block=True, options={"opt_level": 2})
    assert v["jit_key"] == variant_jit_key(record, expected, "sm_90")
    assert v["compile"]["specialized"]["args"] == ["1:f32:2.5"]
    assert v["compile"]["specialized"]["block"] == [128, 1, 1]
    assert v["compile"]["config"]["opt"] == "2" and v["block"] == [128, 1, 1]
    text = run_kir("replay", "--plan", "--specialize", "1", "--bounds", "256", record.path)
    assert text.returncode == 0, text.stderr
    assert "jit key   " + variant_jit_key(record, Variant(args=[1], bounds=256), "sm_90") in text.stdout
    assert re.search(r"resources registers \d+", text.stdout)
    launch_only = run_kir("replay", "--plan", "--grid", "4,1,1", record.path)
    assert launch_only.returncode == 0 and "the recorded code (nothing to compile)" in launch_only.stdout


def test_plan_fills_the_kernel_object_cache(record, tmp_path):
    """`--plan --jit-cache DIR`: the variant's code, compiled on the CPU, stored under
    its JIT key with kir.jit's metadata (what the JIT client looks up)."""
    from kir.cache import Cache
    cache = tmp_path / "cache"
    result = run_kir("replay", "--plan", "--json", "--specialize", "jit", "--jit-cache", cache, record.path)
    assert result.returncode == 0, result.stderr
    v = json.loads(result.stdout)["variant"]
    assert v["stored"] == str(cache)
    entry = Cache(str(cache)).lookup(v["jit_key"])
    assert entry is not None and entry.arch == "sm_90" and entry.kind == "cubin"
    # assembled by the tool the entry names (assembler auto picks ptxas or nvJitLink by
    # what this process has warm, issue 23 §4; their versions may differ)
    tool = "ptxas" if entry.meta["resources.tool"].startswith("ptxas") else "nvjitlink"
    compiled = compile_variant(record, Variant(args="jit", options={"assembler": tool}), "sm_90")
    assert entry.code[:4] == b"\x7fELF" and len(entry.code) == len(compiled.code)


@pytest.mark.parametrize("args, message", [
    (["--specialize", "4"], "POS:TYPE"),
    (["--specialize", "jit", "--specialize", "1"], "stands alone"),
    (["--specialize-dims", "warp"], "--specialize-dims"),
    (["--bounds", "x"], "--bounds"),
    (["--pipeline", "nonsense<>"], "pipeline"),
])
def test_bad_variant_options_exit_2(record, args, message):
    result = run_kir("replay", "--plan", *args, record.path)
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


# --- on a GPU ------------------------------------------------------------------------

@pytest.fixture
def recorded(gpu, built, tmp_path):
    """rec_clang_ir recorded for real (saxpy, with its IR)."""
    if "rec_clang_ir" not in built:
        pytest.skip("rec_clang_ir is not built here")
    out = tmp_path / "rec"
    result = run_kir("record", "-o", out, "--", built["rec_clang_ir"], "65536")
    assert result.returncode == 0, result.stderr[-3000:]
    (path,) = sorted((out / "records").glob("*.kirrec"))
    return Record.load(path)


def test_three_variants_in_one_replayer_all_verify(recorded, tmp_path):
    from kir.cache import Cache
    from kir.replay import Replayer
    launch = recorded.launch
    variants = [Variant(name="recorded", repeat=3),
                Variant(name="half blocks", block=(128, 1, 1), grid=(launch.grid[0] * 2, 1, 1), repeat=3),
                Variant(name="O2 dims", specialize_block=True, options={"opt_level": 2}, repeat=3)]
    with Replayer(recorded, cache=tmp_path / "cache") as replayer:
        results = [replayer.run(v) for v in variants] + [replayer.run(variants[2])]
    for result in results:
        assert result.verified, result.mismatches
        assert len(result.times_ms) == 3 and all(t > 0 for t in result.times_ms)
        assert result.registers and result.code_size
    assert [r.compiled for r in results] == [False, False, True, True]
    assert results[2].jit_key == variant_jit_key(recorded, variants[2], "sm_90")
    assert results[3].cached and results[3].jit_key == results[2].jit_key
    assert results[2].compile_seconds > 0
    assert Cache(str(tmp_path / "cache")).lookup(results[2].jit_key) is not None
    # many records in one process: a second Replayer maps the same addresses again
    with Replayer(recorded) as again:
        assert again.run(variants[1]).verified


def test_variant_key_is_the_jit_clients(recorded, built, tmp_path):
    """`kir run --all` misses on an empty cache and names the launch's key: the
    variant compiled with default options for the recorded launch has that key;
    stored by the Replayer, the app's next run hits it."""
    from kir.replay import Replayer
    cache = tmp_path / "cache"
    app = built["rec_clang_ir"]
    miss = run_kir("run", "--jit-cache", cache, "--all", "--", app, "65536")
    assert miss.returncode == 0, miss.stderr[-2000:]
    keys = re.findall(rf"kir-jit: miss {SAXPY} key=([0-9a-f]{{32}})", miss.stderr)
    variant = Variant(options={})
    assert keys == [variant_jit_key(recorded, variant, "sm_90")]
    with Replayer(recorded, cache=cache) as replayer:
        assert replayer.run(variant).verified
    stats = tmp_path / "stats.json"
    hit = run_kir("run", "--jit-cache", cache, "--all", "--stats", stats, "--", app, "65536")
    assert hit.returncode == 0, hit.stderr[-2000:]
    assert json.loads(stats.read_text())["hits"] >= 1


def test_a_replay_within_a_ulp_tolerance_is_verified(gpu, tmp_path, saxpy):
    """The recorded y 1 ulp above what saxpy computes (write_record's epilogue_ulps):
    bitwise a mismatch; with --ulp 1 verified, saying by how much, the recorded code
    and a variant compiled from the IR alike; --ulp 0 is a mismatch again."""
    path = write_record(tmp_path / "rec", saxpy, epilogue_ulps=1).path
    bitwise = run_kir("replay", path, "--json")
    assert bitwise.returncode == 1, bitwise.stderr
    (m,) = json.loads(bitwise.stdout)["mismatches"]
    assert m["max_ulp"] is None and m["differing_bytes"] > 0
    for extra in ((), ("-O", "2")):
        result = run_kir("replay", path, "--ulp", "1", "--json", *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        out = json.loads(result.stdout)
        assert out["verified"] and out["mismatches"] == []
        (d,) = out["differences"]
        assert d["within"] and d["max_ulp"] == 1 and d["ulp_limit"] == 1 and d["region"].endswith(f"{Y:#x}")
    tight = run_kir("replay", path, "--ulp", "0", "--json")
    assert tight.returncode == 1 and json.loads(tight.stdout)["mismatches"][0]["max_ulp"] == 1
