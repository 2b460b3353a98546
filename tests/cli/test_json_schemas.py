"""The JSON Schema files under docs/schemas/ are valid schemas, and what the CLI
prints on real inputs validates against them (and each object names its schema)."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")
from referencing import Registry, Resource  # noqa: E402 (jsonschema's own dependency)

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
APPS = Path(__file__).resolve().parents[1] / "fixtures" / "cli_apps"


def load(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def registry() -> Registry:
    return Registry().with_resources(
        (path.name, Resource.from_contents(json.loads(path.read_text()))) for path in SCHEMAS.glob("*.schema.json"))


def validate(instance, name: str) -> None:
    schema = load(name)
    jsonschema.Draft202012Validator(schema, registry=registry()).validate(instance)


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_schema_files_are_valid(path):
    jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text()))


@pytest.mark.parametrize("name", ["app", "kernels.fatbin", "hip.o", "proteus_cuda", "librdc.a", "kernels_sm90.cubin",
                                  "omp_sm90.o", "embed_bitcode.o"])
def test_inspect(built, kir_cli, name):
    result = kir_cli("inspect", "--json", "--kernels", "--ir", built[name])
    assert result.returncode == 0, result.stderr
    validate(json.loads(result.stdout), "inspect")
    plain = json.loads(kir_cli("inspect", "--json", "--require", "sm_90", built[name]).stdout)
    validate(plain, "inspect")


def test_inspect_files(built, kir_cli, tmp_path):
    text = tmp_path / "t"
    text.write_text("x")
    result = kir_cli("inspect", "--json", "--kernels", "--require", "sm_75", built["app"], built["hip.o"], text)
    assert result.returncode == 2
    report = json.loads(result.stdout)
    validate(report, "inspect-files")
    assert report["errors"][0]["path"] == str(text) and report["lacking"][0]["path"] == str(built["hip.o"])
    # a wrong schema tag does not validate
    report["files"][0]["schema"] = "kir.inspect/2"
    with pytest.raises(jsonschema.ValidationError):
        validate(report, "inspect-files")


@pytest.mark.parametrize("name", ["app", "hip.o", "proteus_cuda"])
def test_hash(built, kir_cli, name):
    """--json: one kir.hash/2 document; --jsonl: the same records, one kir.hash/1 line each."""
    document = json.loads(kir_cli("hash", "--json", built[name]).stdout)
    validate(document, "hash")
    result = kir_cli("hash", "--jsonl", built[name])
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert lines
    for line in lines:
        validate(line, "hash-line")
    assert [{k: v for k, v in line.items() if k != "schema"} for line in lines] == document["kernels"]
    with pytest.raises(jsonschema.ValidationError):
        validate(lines[0], "hash")  # a line is not the document


def test_hash_document_lists_unreadable_files(built, kir_cli, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a binary\n")
    result = kir_cli("hash", "--json", built["app"], text)
    assert result.returncode == 2 and f"kir: error: {text}" in result.stderr
    document = json.loads(result.stdout)
    validate(document, "hash")
    assert document["kernels"] and [e["path"] for e in document["errors"]] == [str(text)]


def test_diff(kir_cli, tmp_path):
    a, b = tmp_path / "a.o", tmp_path / "b.o"
    for target, defines in ((a, []), (b, ["-DVARIANT"])):
        subprocess.run(["nvcc", "-c", "-arch=sm_90", *defines, str(APPS / "diff_kernels.cu"), "-o", str(target)],
                       check=True, capture_output=True)
    result = kir_cli("diff", "--json", "--unchanged", a, b)
    report = json.loads(result.stdout)
    validate(report, "diff")
    assert report["changed"] and report["added"] and report["removed"]


def test_trace(built, kir_cli):
    result = kir_cli("trace", "--json", built["hook_app"], "2")
    events = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert {e["event"] for e in events} >= {"register-fatbin", "register-kernel", "register-global", "launch",
                                            "unregister-fatbin"}
    for event in events:
        validate(event, "trace")


def test_extract(built, kir_cli, tmp_path):
    result = kir_cli("extract", "--json", "--ir", built["proteus_cuda"], built["app"], "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report, "extract")
    written = [w for f in report["files"] for w in f["written"]]
    assert {w["kind"] for w in written} >= {"cubin", "ptx", "bitcode", "llvm-ir"}
    for w in written:  # each file is there, of the size said
        assert Path(w["path"]).stat().st_size == w["size"]
    # the same files as the text output lists
    text = kir_cli("extract", "--ir", built["proteus_cuda"], built["app"], "-o", tmp_path / "again")
    assert [line.replace(str(tmp_path / "again"), str(tmp_path / "out")) for line in text.stdout.splitlines()] == \
        [w["path"] for w in written]


def test_cache(built, kir_cli, tmp_path):
    import kir
    from kir.cache import Cache
    cache = Cache(tmp_path / "cache")
    cache.store("0a" * 16, built["kernels_sm90.cubin"].read_bytes(), "cubin", "sm_90", {"producer": "tests"})
    ptx = next(i for i in kir.open(built["app_compress_none"]).images if i.kind == "ptx").read()
    cache.store("0b" * 16, ptx, "ptx", "sm_90", {})
    directory = tmp_path / "cache"
    for verb, *rest in (["ls"], ["show", "0a"], ["verify"], ["rm", "0b"]):
        result = kir_cli("cache", verb, directory, *rest, "--json")
        assert result.returncode == 0, (verb, result.stderr)
        validate(json.loads(result.stdout), "cache")
    (directory / "0a" / ("0a" * 16)).write_bytes(b"damaged")  # verify names it, still the schema
    result = kir_cli("cache", "verify", directory, "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    validate(report, "cache")
    assert report["problems"]


def test_record(tmp_path):
    """A fresh recording's metadata validates against its version's schema (generated
    from kir/record/metadata.hpp; tests/record/test_record_versions.py checks the files are
    what the table gives), and the checked-in version-1 recording against version 1's."""
    import msgpack

    from kir.record import FORMAT, RECORD_LAYOUT, Recording
    from kir.record_schema import as_json
    from record_fuzz import write_recording
    path, _ = write_recording(tmp_path)
    meta = as_json(msgpack.unpackb(path.read_bytes()[RECORD_LAYOUT.size:]))
    validate(meta, f"record-v{FORMAT['version']}")
    [old] = Recording(Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "recording").record_paths
    validate(as_json(msgpack.unpackb(old.read_bytes()[RECORD_LAYOUT.size:])), "record-v1")
    for broken in ({**meta, "version": 1}, {**meta, "launch": {**meta["launch"], "dynamic_hash": "0" * 32}},
                   {**meta, "chunk_size": 0}):
        with pytest.raises(jsonschema.ValidationError):
            validate(broken, f"record-v{FORMAT['version']}")
