"""The C ABI an outside client builds on (docs/abi.md): the headers' version macros,
the running libkir's answers and the Python package's view agree; the offsets of
appended fields are the frozen ones; struct_size tells an older and a newer caller
what kir filled; and every error code comes from a real bad input, with its byte
offset, alike through the C ABI (tests/packaging/downstream/abi_check.c, built here against the
installed package as a downstream project would) and from Python (a KirError subclass
per code with .code and .offset)."""
from __future__ import annotations

import hashlib
import os
import re
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import kir
from kir import _core
from kir.cache import Cache, encode_entry, parse_entry
from kir.errors import ErrorCode, KirError, error_class

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = ROOT / "libkir" / "include" / "kir"
KEY = "00112233445566778899aabbccddeeff"


def macros(header: str, prefix: str) -> dict[str, int]:
    """The integer #defines of `header` whose names start with `prefix`."""
    text = (INCLUDE / header).read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(rf"#define ({prefix}\w*) (\d+)\b", text)}


@pytest.fixture(scope="module")
def abi_check(tmp_path_factory) -> Path:
    """tests/packaging/downstream's abi_check, built against the installed package's CMake package."""
    build = tmp_path_factory.mktemp("downstream-abi")
    for args in (["cmake", "-S", ROOT / "tests" / "packaging" / "downstream", "-B", build, "-G", "Ninja", f"-Dkir_DIR={kir.cmake_dir()}"],
                 ["cmake", "--build", build, "--target", "abi_check"]):
        proc = subprocess.run([str(a) for a in args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return build / "abi_check"


def run_c(abi_check: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([abi_check, *map(str, args)], capture_output=True, text=True, timeout=60)


def c_error(proc: subprocess.CompletedProcess) -> tuple[int, int | None, str]:
    """(code, offset or None, message) of abi_check's "error CODE OFFSET|- MESSAGE"."""
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    m = re.fullmatch(r"error (\d+) (\d+|-) (.*)\n", proc.stdout)
    assert m, proc.stdout
    return int(m.group(1)), None if m.group(2) == "-" else int(m.group(2)), m.group(3)


# --- versions ---------------------------------------------------------------------------

def test_versions_agree(abi_check):
    """kir.h's and cache.h's macros = the running libkir's queries = the Python view = docs/abi.md."""
    abi = macros("kir.h", "KIR_ABI_VERSION")["KIR_ABI_VERSION"]
    cache_abi = macros("cache.h", "KIR_CACHE_ABI_VERSION")["KIR_CACHE_ABI_VERSION"]
    lines = run_c(abi_check, "versions").stdout.splitlines()
    assert lines[0] == f"kir.h {abi} {abi}" and lines[1] == f"cache.h {cache_abi} {cache_abi}", lines
    assert kir.c_abi_version == _core.C_ABI_VERSION == abi
    assert kir.cache_abi_version == _core.CACHE_ABI_VERSION == cache_abi
    # The release: the header's KIR_VERSION_*, kir_version(), the package and CMake's project version.
    release = macros("kir.h", "KIR_VERSION_")
    text = f"{release['KIR_VERSION_MAJOR']}.{release['KIR_VERSION_MINOR']}.{release['KIR_VERSION_PATCH']}"
    assert lines[2] == f"release {text} {text}" and kir.__version__ == text
    assert re.search(rf"project\(kir VERSION {re.escape(text)} ", (ROOT / "CMakeLists.txt").read_text())
    assert lines[3] == "last error 0 1"  # KIR_ERROR_NONE, KIR_NO_OFFSET before any failure
    # docs/abi.md names each header's version and lists every version's additions.
    doc = (ROOT / "docs" / "abi.md").read_text()
    assert f"`KIR_ABI_VERSION` {abi}." in doc and f"`KIR_CACHE_ABI_VERSION` {cache_abi} " in doc
    kir_rows = re.findall(r"^\| (\d+) \|", doc.split("## kir.h")[1].split("## cache.h")[0], re.M)
    cache_rows = re.findall(r"^\| (\d+) \|", doc.split("## cache.h")[1].split("## hooks.h")[0], re.M)
    assert kir_rows == [str(v) for v in range(1, abi + 1)] and cache_rows == [str(v) for v in range(1, cache_abi + 1)]
    # Each "since ABI N" in kir.h names a version docs/abi.md lists.
    assert all(1 <= int(n) <= abi for n in re.findall(r"since ABI (\d+)", (INCLUDE / "kir.h").read_text()))


def test_error_codes_agree():
    """KIR_ERROR_* (kir.h) = kir::ErrorCode (the core's name table) = kir.errors.ErrorCode,
    each with its own KirError subclass; docs/abi.md's table lists them all."""
    header = {name.removeprefix("KIR_ERROR_"): v for name, v in macros("kir.h", "KIR_ERROR_").items()}
    assert header == {c.name: c.value for c in ErrorCode}
    assert _core.error_codes == {c.name.lower(): c.value for c in ErrorCode}
    classes = [error_class(c) for c in ErrorCode if c != ErrorCode.NONE]
    assert len(set(classes)) == len(classes) and KirError not in classes
    for code in ErrorCode:
        cls = error_class(code)
        assert issubclass(cls, KirError) and (cls.code == code or code == ErrorCode.NONE)
    doc = (ROOT / "docs" / "abi.md").read_text()
    for code in ErrorCode:
        assert re.search(rf"^\| {code.value} \| `KIR_ERROR_{code.name}` \|", doc, re.M), code


def test_appended_fields_keep_their_offsets(abi_check):
    """A C compiler's offsetof of every field appended after a struct's first version is the
    one the library static_asserts (libkir/core/c_api.cpp, core/cache/c_api.cpp)."""
    asserted = {}
    for source in ("libkir/core/c_api.cpp", "libkir/core/cache/c_api.cpp"):
        for s, f, n in re.findall(r"offsetof\((\w+), (\w+)\) == (\d+)", (ROOT / source).read_text()):
            asserted[f"{s}.{f}"] = int(n)
    seen = dict(line.split() for line in run_c(abi_check, "offsets").stdout.splitlines())
    assert seen and all(asserted[name] == int(offset) for name, offset in seen.items()), (seen, asserted)


def test_struct_size_tells_an_older_and_a_newer_caller_what_kir_filled(abi_check, built):
    app = built["app"]
    kind = kir.open(app).images[0].kind
    seen = dict(line.split(" ", 1) for line in run_c(abi_check, "struct-size", app).stdout.splitlines())
    offsets = dict(line.split() for line in run_c(abi_check, "offsets").stdout.splitlines())
    # ABI 3's struct ends before image_kind: kir filled up to it, not past.
    assert seen["old"] == f"{offsets['kir_image_info.image_kind']} {kind} 1"
    # A newer caller's larger struct: kir says how much it filled (its sizeof), the rest is untouched.
    size = int(offsets["kir_image_info.target_kind"]) + 4
    assert seen["new"] == f"{size} {list(kir.ImageKind).index(kind)} 1"


# --- error codes from real bad input ----------------------------------------------------

def fatbin_with(built, tmp_path: Path, offset: int, fmt: str, value) -> Path:
    """tests/fixtures' kernels.fatbin (a bare fatbin: its container at offset 0) with one field changed."""
    data = bytearray(built["kernels.fatbin"].read_bytes())
    struct.pack_into(fmt, data, offset, value)
    out = tmp_path / "bad.fatbin"
    out.write_bytes(bytes(data))
    return out


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    (tmp_path / name).write_bytes(data)
    return tmp_path / name


def ccob_with_wrong_hash(tmp_path: Path) -> Path:
    """A clang compressed offload bundle (CCOB v3, zlib) whose MD5 field is not the payload's."""
    bundle = b"__CLANG_OFFLOAD_BUNDLE__" + struct.pack("<Q", 0)
    payload = zlib.compress(bundle)
    wrong = struct.unpack_from("<Q", hashlib.md5(bundle).digest())[0] ^ 1
    return write(tmp_path, "bad.ccob", b"CCOB" + struct.pack("<HHQQQ", 3, 0, 32 + len(payload), len(bundle), wrong)
                 + payload)


# (code, how the input is made, the offset, a phrase of the message)
BAD_BINARIES = {
    "not_found": (ErrorCode.NOT_FOUND, lambda built, tmp: tmp / "missing", None, "No such file"),
    "bad_magic": (ErrorCode.BAD_MAGIC, lambda built, tmp: write(tmp, "t.txt", b"hello world\n"), 0,
                  "not an ELF file, ar archive, fatbin or offload bundle"),
    "truncated": (ErrorCode.TRUNCATED, lambda built, tmp: write(tmp, "cut.fatbin", built["kernels.fatbin"].read_bytes()[:12]),
                  12, "header needs 0x10 bytes, only 0xc are left"),
    "out_of_bounds": (ErrorCode.OUT_OF_BOUNDS, lambda built, tmp: fatbin_with(built, tmp, 0x18, "<Q", 1 << 40), 0x18,
                      "payload size 0x10000000000 (at offset 0x18) runs past the end of the container"),
    "malformed": (ErrorCode.MALFORMED, lambda built, tmp: fatbin_with(built, tmp, 0x14, "<I", 3), 0x14,
                  "header size 0x3 (at offset 0x14) is not between 0x40"),
    "unsupported_version": (ErrorCode.UNSUPPORTED_VERSION, lambda built, tmp: fatbin_with(built, tmp, 4, "<H", 2), 4,
                            "unsupported fatbin container version 2 at offset 0x4"),
    "unsupported": (ErrorCode.UNSUPPORTED, lambda built, tmp: write(tmp, "elf32", built["app"].read_bytes()[:4] + b"\x01"
                                                                    + built["app"].read_bytes()[5:]),
                    4, "unsupported ELF class 1 at offset 0x4"),
    "too_large": (ErrorCode.TOO_LARGE, lambda built, tmp: write(tmp, "b.bundle", b"__CLANG_OFFLOAD_BUNDLE__"
                                                                + struct.pack("<Q", 1 << 40)),
                  24, "offload bundle claims 1099511627776 entries (at offset 0x18)"),
    "corrupt": (ErrorCode.CORRUPT, lambda built, tmp: ccob_with_wrong_hash(tmp), 0, "hash mismatch"),
}


@pytest.mark.parametrize("case", BAD_BINARIES)
def test_bad_binary_error_code_and_offset(abi_check, built, tmp_path, case):
    code, make, offset, phrase = BAD_BINARIES[case]
    path = make(built, tmp_path)
    with pytest.raises(KirError) as raised:
        for image in kir.open(path).images:  # opening finds most; decoding the rest
            image.kernels
    error = raised.value
    assert type(error) is error_class(code) and error.code == code and error.offset == offset, (error, error.offset)
    assert phrase in str(error)
    # The C ABI: the same code, offset and message.
    assert c_error(run_c(abi_check, "open", path)) == (code, offset, str(error))


def test_invalid_argument(abi_check, built):
    count = len(kir.open(built["app"]).images)
    assert c_error(run_c(abi_check, "image", built["app"], 99)) == (
        ErrorCode.INVALID_ARGUMENT, None, f"image index 99 out of range ({count} images)")
    with pytest.raises(KirError) as raised:
        encode_entry(KEY, b"code", "exe", "sm_90")
    assert type(raised.value) is error_class(ErrorCode.INVALID_ARGUMENT) and raised.value.offset is None
    assert "code kind 'exe' is not one a cache holds" in str(raised.value)


# --- the cache --------------------------------------------------------------------------

def entry_with(field: int, fmt: str, value) -> bytes:
    data = bytearray(encode_entry(KEY, b"\x7fELF code", "cubin", "sm_90", {"producer": "test"}))
    struct.pack_into(fmt, data, field, value)
    return bytes(data)


def test_cache_entry_error_codes_and_offsets():
    """parse_entry's failures (the reader every lookup uses) carry the code and the offset
    of the offending field, the same offset the message names."""
    good = encode_entry(KEY, b"\x7fELF code", "cubin", "sm_90", {"producer": "test"})
    checksum = len(good) - 16
    damaged = bytearray(good)
    damaged[checksum - 1] ^= 0xFF  # the code's last byte
    cases = [(b"NOTCACHE" + good[8:], ErrorCode.BAD_MAGIC, 0),
             (good[:40], ErrorCode.TRUNCATED, 40),
             (entry_with(8, "<I", 2), ErrorCode.UNSUPPORTED_VERSION, 8),
             (entry_with(36, "<I", 5000), ErrorCode.TOO_LARGE, 36),
             (entry_with(60, "<I", 1), ErrorCode.MALFORMED, 60),
             (bytes(damaged), ErrorCode.CORRUPT, checksum)]
    for data, code, offset in cases:
        with pytest.raises(KirError) as raised:
            parse_entry(data)
        error = raised.value
        assert type(error) is error_class(code) and error.offset == offset, (code, error, error.offset)
        assert str(error).startswith(f"at byte offset {offset:#x}: "), str(error)


def test_cache_refusal_is_a_permission_error(abi_check, tmp_path):
    """A cache directory others may write is refused (docs/cache.md): C gets -1 with
    KIR_ERROR_PERMISSION, Python the PermissionRefusedError, the message as before."""
    cache = tmp_path / "cache"
    Cache(cache).store(KEY, b"\x7fELF code", "cubin", "sm_90")
    os.chmod(cache, 0o777)
    with pytest.raises(KirError, match="refused") as raised:
        Cache(cache).lookup(KEY)
    assert type(raised.value) is error_class(ErrorCode.PERMISSION) and raised.value.offset is None
    code, offset, message = c_error(run_c(abi_check, "cache", cache, KEY))
    assert (code, offset) == (ErrorCode.PERMISSION, None) and "refused" in message and str(cache) in message


def test_a_damaged_cache_entry_is_a_miss_through_the_c_abi(abi_check, tmp_path):
    """Not an error: the lookup answers 0 and kir_cache_last_problem names the offset."""
    cache = tmp_path / "cache"
    Cache(cache).store(KEY, b"\x7fELF code", "cubin", "sm_90")
    entry = cache / KEY[:2] / KEY
    data = bytearray(entry.read_bytes())
    data[8] = 7  # the format version
    entry.write_bytes(bytes(data))
    proc = run_c(abi_check, "cache", cache, KEY)
    assert proc.returncode == 0 and proc.stdout.startswith("miss cache entry ") and \
        "at byte offset 0x8: format version 7" in proc.stdout, proc.stdout


def test_cache_directory_errors_are_io_and_not_found(abi_check, tmp_path):
    """A cache directory that is a file (the system's ENOTDIR: KIR_ERROR_IO) or missing
    (KIR_CACHE_OPEN_EXISTING: KIR_ERROR_NOT_FOUND), alike from C and Python.
    (KIR_ERROR_INTERNAL is a driver's or a library's failure: no input makes one.)"""
    (tmp_path / "file").write_text("not a directory")
    for path, code in ((tmp_path / "file", ErrorCode.IO), (tmp_path / "missing", ErrorCode.NOT_FOUND)):
        with pytest.raises(KirError) as raised:
            Cache(path, create=False)
        assert type(raised.value) is error_class(code) and raised.value.offset is None
        assert c_error(run_c(abi_check, "cache", path, KEY)) == (code, None, str(raised.value))
