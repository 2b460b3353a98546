"""One static hash everywhere (docs/hashing.md, "Which code"): for real apps built by
nvcc and clang-22 (CUDA and HIP), with and without the IR the Proteus pass embeds, the static hash of
every kernel is the same from `kir hash` (offline), from the hook layer at registration
(`kir trace`), stored in a record (`kir record`), and recomputed from the record by the
replay planner (`kir replay --plan`) — kernel by kernel. The first two need no GPU (the
runtime registers its fatbins before it looks for a driver); the last two run on the GPU.

`kir hash` lists each kernel once per image that holds it; the hook hashes the image it
picked: without a device the cubin of the highest architecture (HIP: the bundle's first
code object), on the H200 its sm_90 cubin — the same image for these sm_90 apps."""
from __future__ import annotations

import json
from collections import Counter

import pytest

# fixture -> (what the hook picks offline, kernels whose hash must cover embedded IR)
APPS = {
    "hook_app": ("cuda", set()),                                         # nvcc, sm_80 + sm_90 + PTX
    "rec_vector_add": ("cuda", set()),                                   # nvcc, sm_90 + PTX
    "proteus_cuda_shared": ("cuda", {"_Z13proteus_touchPhi"}),           # nvcc, Proteus layout
    "rec_clang_ir": ("cuda", {"_Z5saxpyfPKfPfi", "_Z13proteus_touchPhi"}),  # nvcc + clang IR
    "clang_cuda_app": ("cuda", set()),                                   # clang-22 CUDA
    "clang_proteus_app": ("cuda", {"_Z5saxpyfPKfPfi", "_Z13proteus_touchPhi"}),  # clang-22 + IR
    "hip_app": ("hip", set()),                                           # clang-22 HIP
    "proteus_hip_app": ("hip", {"_Z4axpyfPKfPfi", "_Z5countx"}),         # clang-22 HIP, Proteus layout
}


def app_of(built, name):
    if name not in built:
        pytest.skip(f"fixture {name} not built here (its compiler is missing)")
    return built[name]


def hash_lines(kir_cli, app):
    result = kir_cli("hash", "--json", app)  # one kir.hash/2 document
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "kir.hash/2" and document["errors"] == []
    return document["kernels"]


def expected_image(lines, kernel, runtime):
    """The `kir hash` line of the image the hook launches `kernel` from (no device)."""
    mine = [h for h in lines if h["kernel"] == kernel]
    if runtime == "hip":
        return min((h for h in mine if h["image_kind"] == "code-object"), key=lambda h: h["image"])
    return max((h for h in mine if h["image_kind"] == "cubin"), key=lambda h: int(h["target"][3:]))


@pytest.mark.parametrize("name", sorted(APPS))
def test_kir_hash_and_the_hook_agree(built, kir_cli, name):
    app = app_of(built, name)
    runtime, with_ir = APPS[name]
    lines = hash_lines(kir_cli, app)
    traced = kir_cli("trace", "--json", "--", app)
    events = [json.loads(l) for l in traced.stdout.splitlines() if l.startswith('{"event"')]
    registered = {e["kernel"]: e for e in events if e["event"] == "register-kernel"}
    assert registered, traced.stderr
    for kernel, event in registered.items():
        line = expected_image(lines, kernel, runtime)
        assert event["static"] == line["static"], (kernel, line)
        assert (line["code"] == "ir") == (kernel in with_ir), line
        assert (event["ir"] > 0) == (kernel in with_ir), event


@pytest.mark.parametrize("name", ["hook_app", "rec_clang_ir", "hip_app"])
def test_kir_hash_names_each_kernel_once_per_image(built, kir_cli, name):
    app = app_of(built, name)
    lines = hash_lines(kir_cli, app)
    pairs = Counter((h["kernel"], h["image"]) for h in lines)
    assert pairs and max(pairs.values()) == 1
    text = kir_cli("hash", app).stdout.splitlines()
    assert len(text) == len(set(text)) == len(lines)
    for h, row in zip(lines, text):  # the text names the image each hash comes from
        assert f"{h['image_kind']} image #{h['image']}" in row and h["static"] in row


@pytest.mark.parametrize("name", ["rec_vector_add", "rec_clang_ir", "clang_proteus_app"])
def test_record_and_replay_plan_carry_the_same_hash(gpu, built, kir_cli, tmp_path, name):
    app = app_of(built, name)
    lines = hash_lines(kir_cli, app)
    out = tmp_path / "rec"
    result = kir_cli("record", "-o", out, "--", app)
    assert result.returncode == 0, result.stderr[-3000:]
    listing = json.loads(kir_cli("records", out, "--json").stdout)
    assert listing["records"]
    for r in listing["records"]:
        line = next(h for h in lines if h["kernel"] == r["kernel"] and h["image_kind"] == "cubin"
                    and h["target"] == "sm_90")
        assert r["static_hash"] == line["static"], (r["kernel"], line)
        plan = kir_cli("replay", out / "records" / r["file"], "--plan", "--json")
        assert plan.returncode == 0, plan.stderr[-3000:]
        planned = json.loads(plan.stdout)
        assert planned["computed_static_hash"] == planned["static_hash"] == line["static"]
