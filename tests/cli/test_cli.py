"""The `kir` command line: inspect (table, JSON, filters, scan), extract, exit codes."""
from __future__ import annotations

import json
import subprocess

import pytest

import kir


def inspect_json(kir_cli, *args):
    result = kir_cli("inspect", "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_json_schema_fields(built, kir_cli):
    report = inspect_json(kir_cli, built["app"])
    assert report["schema"] == "kir.inspect/3"
    assert report["kir_version"] == kir.__version__
    assert report["format"] == "elf"
    containers = {c["index"]: c for c in report["containers"]}
    for image in report["images"]:
        assert {"container", "kind", "arch", "size", "stored_size", "compression",
                "file_offset", "version", "flags", "identifier"} <= set(image)
        assert image["container"] in containers
        assert "kernels" not in image
    # The JSON and the Python API agree.
    b = kir.open(built["app"])
    assert [(i["kind"], i["arch"], i["size"]) for i in report["images"]] == \
           [(i.kind, i.arch, i.size) for i in b.images]


def test_json_kernels_by_mangled_name(built, kir_cli):
    report = inspect_json(kir_cli, "--kernels", built["app"])
    b = kir.open(built["app"])
    for record, image in zip(report["images"], b.images):
        assert [k["name"] for k in record["kernels"]] == [k.name for k in image.kernels]
        for k, ours in zip(record["kernels"], image.kernels):
            assert [(p["offset"], p["size"]) for p in k["params"]] == \
                   [(p.offset, p.size) for p in ours.params]
    assert any(k["name"] == "_Z4axpyfPKfPfi" for i in report["images"] for k in i["kernels"])


def test_table_lists_every_image(built, kir_cli):
    result = kir_cli("inspect", built["app"])
    assert result.returncode == 0
    b = kir.open(built["app"])
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"{built['app']}: elf, {len(b.containers)} containers, "
                               f"{len(b.images)} images")
    for image in b.images:
        assert any(l.split()[:3] == [str(image.index), image.kind, image.arch] for l in lines)


def test_table_kernels(built, kir_cli):
    result = kir_cli("inspect", "--kernels", "--arch", "sm_90", built["app"])
    assert result.returncode == 0
    assert "axpy(float, float const*, float*, int)" in result.stdout
    assert "_Z4axpyfPKfPfi  params[4] 0:4 8:8 16:8 24:4" in result.stdout
    assert "sm_75" not in result.stdout


@pytest.mark.parametrize("spec,expected", [("sm_90", {"sm_90"}), ("75,80", {"sm_75", "sm_80"}),
                                           ("compute_80", {"sm_80"})])
def test_arch_filter(built, kir_cli, spec, expected):
    report = inspect_json(kir_cli, "--arch", spec, built["app"])
    assert {i["arch"] for i in report["images"]} == expected


def test_bad_arch_is_a_usage_error(built, kir_cli):
    result = kir_cli("inspect", "--arch", "hopper", built["app"])
    assert result.returncode == 2 and "invalid architecture 'hopper'" in result.stderr


def test_scan_finds_containers_outside_fatbin_sections(built, kir_cli, cuobjdump):
    path = built["embedded_fatbin"]
    # cuobjdump sees nothing; kir reading only what sections name neither.
    proc = subprocess.run([cuobjdump, "-lelf", path], capture_output=True, text=True)
    assert "does not contain device code" in proc.stdout + proc.stderr
    assert inspect_json(kir_cli, "--sections-only", path)["images"] == []
    # By default kir searches the data sections for fatbins; --scan everything: both find it.
    report = inspect_json(kir_cli, path)
    assert inspect_json(kir_cli, "--scan", path) == report
    # Exactly the embedded container: the decoys (magic + nonsense) are not reported.
    assert len(report["containers"]) == 1
    assert report["containers"][0]["section"] == ".data"
    assert report["containers"][0]["found_by"] == "scan"
    reference = kir.open(built["kernels.fatbin"])
    assert [(i["kind"], i["arch"], i["size"]) for i in report["images"]] == \
           [(i.kind, i.arch, i.size) for i in reference.images]


def test_scan_adds_nothing_to_ordinary_binaries(built, kir_cli):
    for name in ("app", "librdc.a", "host_only"):
        assert inspect_json(kir_cli, "--scan", built[name]) == inspect_json(kir_cli, built[name])


def test_no_progress_when_piped(built, kir_cli):
    result = kir_cli("inspect", "--kernels", built["app"])
    assert "decoding images" not in result.stderr and result.stderr == ""


def test_extract_filters(built, kir_cli, tmp_path):
    result = kir_cli("extract", built["app"], "-o", tmp_path, "--arch", "sm_90", "--kind", "ptx")
    assert result.returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.1.sm_90.ptx"]
    text = (tmp_path / "app.1.sm_90.ptx").read_text()
    assert ".entry _Z4axpyfPKfPfi" in text


def test_usage_errors_exit_2(kir_cli):
    assert kir_cli().returncode == 2
    assert kir_cli("frobnicate").returncode == 2


def test_progress_on_a_terminal(built):
    """With a terminal on stdout and stderr, --kernels shows its progress."""
    import os
    import pty
    import sys
    controller, terminal = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "kir", "inspect", "--kernels", built["app"]],
                            stdout=terminal, stderr=terminal)
    os.close(terminal)
    output = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait() == 0
    os.close(controller)
    text = output.decode()
    assert "kir: decoding images" in text
    assert "_Z4axpyfPKfPfi" in text


def test_kind_filter(built, kir_cli):
    report = inspect_json(kir_cli, "--kind", "ptx,lto-ir", built["app"])
    assert sorted(i["kind"] for i in report["images"]) == ["lto-ir", "ptx"]
    result = kir_cli("inspect", "--kind", "cubin", built["app"])
    rows = [l.split() for l in result.stdout.splitlines()[2:] if not l.startswith("--")]
    assert rows and {r[1] for r in rows} == {"cubin"}
    assert kir_cli("inspect", "--kind", "elf", built["app"]).returncode == 2


def test_table_and_json_carry_the_same_kernels(built, kir_cli):
    """The table (rendered by the bindings) and the JSON list the same kernels per image."""
    report = inspect_json(kir_cli, "--kernels", built["app"])
    table = kir_cli("inspect", "--kernels", built["app"]).stdout.splitlines()
    per_image: dict[int, list[str]] = {}
    current = None
    for line in table[2:]:
        fields = line.split()
        if not line.startswith(" ") and fields and fields[0].isdigit():
            current = int(fields[0])
            per_image[current] = []
        elif line.startswith("           ") and current is not None:
            per_image[current].append(fields[0])
    assert per_image == {i["index"]: [k["name"] for k in i["kernels"]] for i in report["images"]}


@pytest.mark.parametrize("names", [["app"], ["libkernels.so"], ["proteus_cuda"], ["jit_app", "proteus_hip_app"]])
def test_json_kernels_from_the_core_are_json_dumps_own_bytes(built, kir_cli, names):
    """`kir inspect --kernels --json` takes each image's kernel list as JSON text
    built by the core (DeviceCode.kernels_json, issue 15); with a --kernel filter it
    builds the dicts and json.dumps writes them. A filter that keeps every kernel
    must print the very same bytes (the Proteus fixtures' kernels carry their IR
    module, a second file goes through the multi-file report)."""
    paths = [built[n] for n in names]
    fast = kir_cli("inspect", "--kernels", "--json", *paths)
    dicts = kir_cli("inspect", "--kernels", "--json", "--kernel", ".", *paths)
    assert fast.returncode == 0 and dicts.returncode == 0, fast.stderr + dicts.stderr
    assert fast.stdout == dicts.stdout
    kernels = [k for f in (json.loads(fast.stdout).get("files") or [json.loads(fast.stdout)])
               for image in f["images"] for k in image.get("kernels", [])]
    assert kernels and (names[0] not in ("proteus_cuda", "jit_app") or
                        any(k["ir_module"] is not None for k in kernels))


@pytest.mark.parametrize("name", ["app", "app_rdc", "hip.o", "clang_cuda_new.o", "librdc.a", "embedded_fatbin",
                                  "hip_ccob_v3.o", "embed_bitcode.o",
                                  "kernels_sm90.cubin"])
def test_the_listing_s_json_from_the_core_is_json_dumps_own_bytes(built, name):
    """`kir inspect --json` without --kernels takes its images and containers as JSON
    text from the core (image_records_json, issue 26's speed): the very bytes json.dumps
    writes of the dicts, for every format and field (bundle ids, offloading string
    maps, wrappers, archive members), and for a selection of them."""
    core = kir.open(built[name])._check_open()
    records = core.image_records()
    for r in records:
        r["target"] = r["arch"]
    assert records and core.image_records_json() == json.dumps(records, separators=(",", ":"))
    assert core.container_records_json() == json.dumps(core.container_records(), separators=(",", ":"))
    some = list(range(0, len(records), 2))
    assert core.image_records_json(some) == json.dumps([records[i] for i in some], separators=(",", ":"))
    with pytest.raises(IndexError):
        core.image_records_json([len(records)])


def test_a_name_json_escapes_takes_the_dicts_and_prints_the_same_document(built, kir_cli, tmp_path):
    """An archive member named outside ASCII: the core's text gives way (None) and
    json.dumps writes the report, escapes and all."""
    archive = tmp_path / "lib.a"
    member = tmp_path / "k\u00e9rnels.o"
    member.write_bytes(built["kernels.o"].read_bytes())
    subprocess.run(["ar", "rc", archive, member], check=True, cwd=tmp_path)
    core = kir.open(archive)._check_open()
    assert core.container_records_json() is None
    result = kir_cli("inspect", "--json", archive)
    assert result.returncode == 0 and "k\\u00e9rnels.o" in result.stdout
    report = json.loads(result.stdout)
    assert report["containers"] and {c["member"] for c in report["containers"]} == {"k\u00e9rnels.o"}
    assert len(report["images"]) == len(kir.open(archive).images)


def test_inspect_json_names_the_target_as_hash_does_and_pretty_is_the_same_document(built, kir_cli):
    """Issue 26: `inspect` said "arch" where `hash` says "target"; and JSON could not be
    printed for a reader."""
    app = built["app"]
    report = inspect_json(kir_cli, app)
    assert all(i["target"] == i["arch"] for i in report["images"])
    hashed = [json.loads(line) for line in kir_cli("hash", "--jsonl", app).stdout.splitlines()]
    by_index = {i["index"]: i for i in report["images"]}
    assert hashed and all(h["target"] == by_index[h["image"]]["target"] for h in hashed)
    pretty = kir_cli("inspect", "--json", "--pretty", app)
    assert pretty.returncode == 0 and json.loads(pretty.stdout) == report
    assert pretty.stdout.startswith('{\n  "schema": "kir.inspect/3"') and len(pretty.stdout.splitlines()) > 50
    many = kir_cli("inspect", "--json", "--pretty", app, built["kernels.fatbin"])
    assert many.returncode == 0 and json.loads(many.stdout)["schema"] == "kir.inspect-files/1"
    refused = kir_cli("inspect", "--pretty", app)
    assert refused.returncode == 2 and "--pretty: only with --json" in refused.stderr


def test_every_json_verb_prints_one_document_and_pretty_indents_it(built, kir_cli, tmp_path):
    """Issue 26: `inspect --json` printed one document, `hash --json` JSON Lines, and only
    inspect had --pretty. Now --json is one document in every verb (kir trace, whose
    events stream, says --jsonl) and --pretty indents any of them."""
    app, fatbin = built["app"], built["kernels.fatbin"]
    runs = {("hash",): [app, fatbin], ("diff",): [app, app], ("extract",): ["-o", tmp_path / "x", fatbin],
            ("inspect",): [app, fatbin]}
    for verb, rest in runs.items():
        compact = kir_cli(*verb, "--json", *rest)
        assert compact.returncode == 0, (verb, compact.stderr)
        document = json.loads(compact.stdout)  # one document: more than one would not parse
        if verb == ("extract",):
            for path in (tmp_path / "x").iterdir():
                path.unlink()
        pretty = kir_cli(*verb, "--json", "--pretty", *rest)
        assert pretty.returncode == 0 and json.loads(pretty.stdout) == document, verb
        assert pretty.stdout.startswith('{\n  "schema": '), verb
    both = kir_cli("hash", "--json", "--jsonl", app)
    assert both.returncode == 2 and "give one of --json (one document) and --jsonl" in both.stderr
    lines = kir_cli("hash", "--jsonl", "--pretty", app)  # lines are not indented: refused
    assert lines.returncode == 2 and "--pretty: only with --json" in lines.stderr
    trace = kir_cli("trace", "--pretty", "--", "true")
    assert trace.returncode == 2 and "unrecognized arguments: --pretty" in trace.stderr
