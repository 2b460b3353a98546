"""Fuzzing the Python record reader (kir.record): a real recording written by the
C++ writer (kir._core.RecordBuilder, the code the in-app recorder runs), its
record file or one of its chunk files mutated at random (bytes overwritten,
inserted, deleted, truncated, header fields set to extremes), then read as
`kir records` and `kir replay` would (Record.load, check, prologue/epilogue,
code). Whatever the damage, the reader answers with its value or a KirError —
never another exception. Fixed seed (derandomized) and a bounded number of
examples, so CI runs the same inputs every time; KIR_FUZZ_RECORD_EXAMPLES
raises the count for a longer run outside CI."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kir import _core
from kir.errors import KirError
from kir.record import FORMAT
from record_fuzz import mutate, read_everything, write_recording

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(_core, "RecordBuilder"),
                                reason="kir._core.RecordBuilder is not in this build")

EXAMPLES = int(os.environ.get("KIR_FUZZ_RECORD_EXAMPLES", "300"))


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> tuple[Path, Path, list[Path]]:
    """(directory, record file, chunk files) of write_recording's recording."""
    directory = tmp_path_factory.mktemp("fuzz-recording")
    path, chunks = write_recording(directory)
    read_everything(path)  # the undamaged recording reads whole
    return directory, path, chunks


def header_fields(which: str) -> list[tuple[int, int]]:
    """(offset, size) of each integer field of a file header ("record_header" or
    "chunk_header"), as the C++ writer lays it out."""
    return [(offset, size) for _, offset, size, kind in FORMAT[which]["fields"] if kind in ("u32", "u64")]


MUTATION = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 16), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 16), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("field"), st.integers(0, 63),
              st.sampled_from([0, 1, 0x7F, 0xFFFF, 0xFFFFFFFF, 1 << 40, (1 << 63) - 1, (1 << 64) - 1])),
)


@pytest.mark.slow  # a fuzz loop
def test_damaged_records_raise_only_kir_errors(recording):
    directory, record_path, chunks = recording
    files = [record_path, *chunks]
    outcomes = {"read": 0, "refused": 0}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(target=st.integers(0, 1 << 16), mutations=st.lists(MUTATION, min_size=1, max_size=6))
    def damaged(target, mutations):
        victim = files[target % len(files)]
        fields = header_fields("record_header" if victim == record_path else "chunk_header")
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "rec"
            shutil.copytree(directory, copy)
            damaged_file = copy / victim.relative_to(directory)
            damaged_file.write_bytes(mutate(victim.read_bytes(), mutations, fields))
            try:
                read_everything(copy / record_path.relative_to(directory))
                outcomes["read"] += 1
            except KirError:
                outcomes["refused"] += 1  # a precise refusal: what the reader owes damaged input

    damaged()
    # Bytes changed behind the checksums: nearly all refused, by the header checks
    # or the XXH3 of the body or chunk (not a write of the same bytes, or of the
    # record header's reserved field).
    assert outcomes["refused"] > EXAMPLES * 9 // 10, outcomes


def positions(value, at=()):
    """Every (container, key) in the metadata, nested ones included."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.append((value, key))
        found.extend(positions(item))
    return found


def reseal(record: Path, meta) -> None:
    """Write `meta` as the record's body with a header that matches it (size and
    XXH3-128): damage the checksums cannot catch, for the metadata checks."""
    import msgpack
    body = msgpack.packb(meta, use_bin_type=True)
    data = bytearray(record.read_bytes()[:FORMAT["record_header"]["size"]])
    layout = {name: (offset, size) for name, offset, size, _ in FORMAT["record_header"]["fields"]}
    digest = int(str(_core.xxh3_128(body)), 16)
    for name, value in (("body_size", len(body)), ("hash_high", digest >> 64), ("hash_low", digest & ((1 << 64) - 1))):
        offset, size = layout[name]
        data[offset:offset + size] = value.to_bytes(size, "little")
    record.write_bytes(bytes(data) + body)


VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), st.sampled_from([0, -1, 1, 7, 4096, 1 << 31, 1 << 32, (1 << 63) - 1,
                                                          (1 << 64) - 1, -(1 << 63)]),
              st.floats(allow_nan=True), st.text(max_size=40), st.binary(max_size=40)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=8)


@pytest.mark.slow  # a fuzz loop
def test_records_with_damaged_metadata_raise_only_kir_errors(recording):
    """The metadata map changed and the file resealed: values of the wrong type,
    out of range, missing or extra — read as `kir records` would, only KirError."""
    import msgpack
    directory, record_path, _ = recording
    original = msgpack.unpackb(record_path.read_bytes()[FORMAT["record_header"]["size"]:], raw=False)
    outcomes = {"read": 0, "refused": 0}

    @settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(edits=st.lists(st.tuples(st.integers(0, 1 << 16), st.booleans(), VALUE), min_size=1, max_size=4))
    def damaged(edits):
        import copy as deep
        meta = deep.deepcopy(original)
        for where, delete, value in edits:
            spots = positions(meta)
            if not spots:
                break
            container, key = spots[where % len(spots)]
            if delete and isinstance(container, dict):
                del container[key]
            else:
                container[key] = value
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "rec"
            shutil.copytree(directory, copy)
            target = copy / record_path.relative_to(directory)
            reseal(target, meta)
            try:
                read_everything(target)
                outcomes["read"] += 1
            except KirError:
                outcomes["refused"] += 1

    damaged()
    # Edits that keep the metadata valid read: a stats figure changed, an unknown key added.
    for edit in ({"store_seconds": 2.5}, {"a_key_of_a_later_kir": [1, "x"]}):
        import copy as deep
        meta = deep.deepcopy(original)
        meta["stats"].update(edit)
        with tempfile.TemporaryDirectory() as scratch:
            copy = Path(scratch) / "rec"
            shutil.copytree(directory, copy)
            target = copy / record_path.relative_to(directory)
            reseal(target, meta)
            read_everything(target)
            outcomes["read"] += 1
    assert outcomes["refused"] > 0 and outcomes["read"] > 0, outcomes  # both ends reached
