"""Recording the programs of tests/fixtures/record_apps on a real GPU and replaying their records
(`record`, `replay`, `assert_replays`); shared by the record tests that need a GPU."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kir.record import FORMAT, Record
from running import run_kir

msgpack = pytest.importorskip("msgpack", reason="msgpack not installed (the record reader needs it)")

NVCC_APPS = ["rec_vector_add", "rec_jacobi", "rec_pointer_chase", "rec_device_global", "rec_streams_async",
             "rec_same_kernel_args"]


# Programs whose launches have nothing the format flags (docs/record-format.md, Flags).
UNFLAGGED = {"rec_vector_add", "rec_jacobi", "rec_pointer_chase", "rec_device_global", "rec_same_kernel_args"}


# Stream-ordered allocations come from a pool, which the recorder may not serve from its range.
POOL_FLAGS = {"outside-va-range"}


def app_path(built, name: str) -> Path:
    if name not in built:
        pytest.skip(f"fixture {name} not built here (rec_clang_ir needs clang-22, or a build/test-fixtures "
                    "cache carried from a machine that has it)")
    return built[name]


def run_bare(app: Path, *args: str) -> str:
    proc = subprocess.run([str(app), *args], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{app.name} failed bare: {proc.stderr[-2000:]}"
    assert proc.stdout.strip(), f"{app.name} printed nothing"
    return proc.stdout


class Recorded:
    """One app recorded into `out`: its bare output, `kir records --json`, and the
    records' metadata read straight from the files (docs/record-format.md)."""

    def __init__(self, app: Path, out: Path, options: tuple[str, ...], args: tuple[str, ...]) -> None:
        self.app, self.out = app, out
        self.bare = run_bare(app, *args)
        result = run_kir("record", *options, "-o", out, "--", app, *args)
        assert result.returncode == 0, f"kir record {app.name}: {result.stderr[-3000:]}"
        assert result.stdout == self.bare, "the app's output changed under kir record"
        listing = run_kir("records", out, "--json")
        assert listing.returncode == 0, listing.stderr[-2000:]
        self.listing = json.loads(listing.stdout)
        assert self.listing["format"] == "kir.records/1"
        self.records = sorted(self.listing["records"], key=lambda r: (r["kernel"], r["ordinal"]))
        assert self.records, f"kir record {app.name} wrote no records"
        self.meta = {r["file"]: read_meta(self.path(r)) for r in self.records}
        on_disk = sorted((out / "records").glob("*.kirrec"))
        assert len(on_disk) == len(self.records)

    def path(self, record: dict) -> Path:
        return self.out / "records" / record["file"]

    def of(self, kernel: str) -> list[dict]:
        return [r for r in self.records if r["kernel"] == kernel]

    def kernels(self) -> set[str]:
        return {r["kernel"] for r in self.records}


def read_meta(path: Path) -> dict:
    """A record file's metadata, checked as docs/record-format.md describes it."""
    data = path.read_bytes()
    assert data[:8] == b"KIRRECRD", path
    version = int.from_bytes(data[8:12], "little")
    body_size = int.from_bytes(data[16:24], "little")
    assert version == FORMAT["version"] and len(data) == 40 + body_size, path
    meta = msgpack.unpackb(data[40:], raw=False, strict_map_key=False)
    assert meta["format"] == "kir.record" and meta["version"] == FORMAT["version"]
    name = path.name.split(".")
    assert name[0] == meta["kernel"]["static_hash"] and name[1] == meta["launch"]["launch_identity"]
    assert "dynamic_hash" not in meta["launch"]  # format 1's: version-1 records only
    # write (the in-app recorder) -> read -> write gives the same bytes (tests/record/test_record_versions.py)
    assert msgpack.packb(Record.load(path).metadata()) == data[40:], path
    return meta


def record(tmp_path_factory, app: Path, *options: str, args: tuple[str, ...] = ()) -> Recorded:
    return Recorded(app, tmp_path_factory.mktemp(app.name), options, args)


def binary_kernels(app: Path) -> set[str]:
    """The kernels of the binary's sm_90 cubin, as `kir inspect --kernels --json` lists them."""
    result = run_kir("inspect", "--kernels", "--json", "--arch", "sm_90", "--kind", "cubin", app)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    return {k["name"] for image in report["images"] for k in image.get("kernels", [])}


def binary_globals(app: Path) -> set[str]:
    result = run_kir("inspect", "--kernels", "--json", "--arch", "sm_90", "--kind", "cubin", app)
    report = json.loads(result.stdout)
    return {g["name"] for image in report["images"] for g in image.get("globals", [])}


def replay(path: Path, *options: str) -> tuple[int, dict]:
    result = run_kir("replay", path, *options, "--json")
    assert result.returncode in (0, 1), f"kir replay {path.name} {' '.join(options)}: {result.stderr[-3000:]}"
    return result.returncode, json.loads(result.stdout)


def assert_replays(rec: Recorded, record_entry: dict, codes=("cubin", "ptx")) -> None:
    path = rec.path(record_entry)
    for code in codes:
        status, out = replay(path, "--code", code)
        where = f"{rec.app.name} {record_entry['demangled']} #{record_entry['ordinal']} --code {code}"
        assert out["code"] == code, where
        assert out["verified"] is True and out["mismatches"] == [], f"{where}: {out}"
        assert out["hashes_match"] is True, f"{where}: {out}"
        assert out["variant"] is False, where
        assert status == 0, where
        if code == "cubin":
            assert out["static_hash"] == record_entry["static_hash"], where
            assert out["launch_identity"] == record_entry["launch_identity"], where
