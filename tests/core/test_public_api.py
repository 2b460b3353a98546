"""The Python API's surface (issue 14 §3): kir.Binary as a context manager with
close() and a useful repr; one type per concept (an architecture is the string
"sm_90" everywhere, a kir hash is 32 hex digits everywhere, in Python as in JSON);
__all__ in every public module, naming what exists."""
from __future__ import annotations

import dataclasses
import gc
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
from pathlib import Path

import pytest

import kir
from kir.errors import KirError

HEX32 = re.compile(r"[0-9a-f]{32}")
PACKAGE = Path(kir.__file__).resolve().parent


def public_modules() -> list[str]:
    """Every module of the installed package but _private ones and __main__."""
    names = ["kir"]
    for info in pkgutil.walk_packages([str(PACKAGE)], "kir."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


# --- __all__ ---------------------------------------------------------------------------

def test_the_walk_finds_the_package():
    modules = public_modules()
    assert {"kir.binary", "kir.hashing", "kir.record", "kir.progress", "kir.commands.inspect", "kir.jit.client",
            "kir.replay.planner", "kir.tune.study"} <= set(modules)
    assert not any(m.endswith(("_core", "__main__")) for m in modules)


@pytest.mark.parametrize("name", public_modules())
def test_every_public_module_has_a_true_all(name):
    module = importlib.import_module(name)
    assert isinstance(getattr(module, "__all__", None), (list, tuple)), f"{name} has no __all__"
    names = list(module.__all__)
    assert all(isinstance(n, str) for n in names) and len(names) == len(set(names)), name
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    assert all(not n.startswith("_") or n == "__version__" for n in names), name


def test_star_import_gives_the_api():
    scope: dict = {}
    exec("from kir import *", scope)  # noqa: S102
    assert {"Binary", "Image", "open", "KirError", "cmake_dir"} <= set(scope)


# --- kir.Binary: context manager, close(), repr ----------------------------------------

def mapped(path: Path) -> bool:
    return any(line.rstrip().endswith(str(path)) for line in Path("/proc/self/maps").read_text().splitlines())


@pytest.fixture
def big_app(built, tmp_path) -> Path:
    """The fixture app grown (sparse) past the size kir copies instead of mapping
    (64 MiB, libkir MappedFile::kCopyLimit): the file is then mapped."""
    path = tmp_path / "big_app"
    shutil.copyfile(built["app"], path)
    os.truncate(path, 65 << 20)
    return path


def test_with_closes_and_unmaps(big_app):
    with kir.open(big_app) as binary:
        assert mapped(big_app)
        kinds = [i.kind for i in binary.images]
        assert not binary.closed
    assert binary.closed and kinds
    gc.collect()
    assert not mapped(big_app)


def test_what_was_taken_keeps_the_mapping_until_dropped(big_app):
    binary = kir.open(big_app)
    image = next(i for i in binary.images if i.kind == "cubin" and i.kernels)
    kernels = image.kernels  # decoded before close: stays valid
    binary.close()
    gc.collect()
    assert mapped(big_app)  # the Image still refers to it
    with pytest.raises(KirError, match=r"big_app: the binary is closed"):
        image.read()
    del image
    gc.collect()
    assert not mapped(big_app)
    assert kernels and all(k.name for k in kernels)


@pytest.mark.parametrize("use", ["images", "containers", "wrappers", "members", "load_code", "iter", "with"])
def test_a_closed_binary_raises_kir_error(built, use):
    binary = kir.open(built["app"])
    binary.close()
    binary.close()  # twice is fine
    call = {"images": lambda: binary.images, "containers": lambda: binary.containers,
            "wrappers": lambda: binary.wrappers, "members": lambda: binary.members,
            "load_code": lambda: binary.load_code(), "iter": lambda: list(binary),
            "with": lambda: binary.__enter__()}[use]
    with pytest.raises(KirError, match="the binary is closed"):
        call()
    assert binary.path == str(built["app"]) and binary.format == "elf"  # still known


def test_report_functions_refuse_a_closed_binary(built):
    from kir.report import build_report, render_table
    binary = kir.open(built["app"])
    binary.close()
    for call in (lambda: build_report(binary, None, None, False), lambda: render_table(binary)):
        with pytest.raises(KirError, match="closed"):
            call()


def test_reprs(built):
    binary = kir.open(built["librdc.a"])
    images = binary.images
    assert repr(binary) == (f"<kir.Binary {str(built['librdc.a'])!r} archive, {len(binary.containers)} containers, "
                            f"{len(images)} images>")
    container = binary.containers[0]
    assert repr(container) == (f"<kir.Container #0 {container.format} {container.member}:{container.section}"
                               f"@{container.file_offset:#x} {len(container.images)} images>")
    image = images[0]
    assert repr(image) == f"<kir.Image #0 {image.kind} {image.target} {image.size} bytes>"
    binary.close()
    assert repr(binary) == f"<kir.Binary {str(built['librdc.a'])!r} archive (closed)>"


# --- one type per concept --------------------------------------------------------------

def test_an_architecture_is_one_string_everywhere(built, kir_cli):
    """Image.arch/target, the fatbin entry's arch, `kir inspect --json`'s and `kir hash
    --json`'s: "sm_90", the same string; the raw header number is entry.sm."""
    binary = kir.open(built["app"])
    report = json.loads(kir_cli("inspect", "--json", built["app"]).stdout)
    hashes = [json.loads(line) for line in kir_cli("hash", "--jsonl", built["app"]).stdout.splitlines()]
    by_index = {i["index"]: i for i in report["images"]}
    for image in binary.images:
        assert image.arch == image.target == by_index[image.index]["arch"]
        if image.entry is not None and image.kind in ("cubin", "ptx"):
            assert isinstance(image.entry.arch, str) and image.entry.arch == image.arch
            assert image.entry.sm == int(image.arch.removeprefix("sm_"))
    assert {h["target"] for h in hashes} <= {i.arch for i in binary.images}


def test_a_kir_hash_is_32_hex_digits_everywhere(built, kir_cli, tmp_path):
    from kir.hashing import Hash128, kernel_hashes
    from replay_records import make_record
    cubin = built["kernels_sm90.cubin"]
    hashes, errors = kernel_hashes(kir.open(cubin))
    assert not errors and hashes
    for h in hashes:
        assert isinstance(h.static_hash, str) and HEX32.fullmatch(h.static_hash)
        assert isinstance(h.static, Hash128) and h.static.hex == h.static_hash  # the older name
    printed = {json.loads(line)["kernel"]: json.loads(line)["static"]
               for line in kir_cli("hash", "--jsonl", cubin).stdout.splitlines()}
    assert printed == {h.kernel: h.static_hash for h in hashes}
    record = make_record(tmp_path / "rec", cubin, "_Z4axpyfPKfPfi")
    [axpy] = [h for h in hashes if h.kernel == "_Z4axpyfPKfPfi"]
    assert type(record.kernel.static_hash) is type(axpy.static_hash) and record.kernel.static_hash == axpy.static_hash
    listed = json.loads(kir_cli("records", tmp_path / "rec", "--json").stdout)["records"]
    assert [r["static_hash"] for r in listed] == [axpy.static_hash]
    # kir.replay's recomputed hashes: the same type as the record's
    from kir import replay
    grid, block = record.launch.grid, record.launch.block
    recomputed = [replay.static_hash(record), replay.launch_identity(record, grid, block),
                  replay.dynamic_hash(record, grid, block)]
    assert all(isinstance(h, str) and HEX32.fullmatch(h) for h in recomputed), recomputed
    assert recomputed[:2] == [record.kernel.static_hash, record.launch.launch_identity]
    assert replay.plan(record).hashes.match is True


def annotated_fields() -> list[tuple[str, str, str]]:
    """(class, field, annotation) of every dataclass field of the public modules."""
    out = []
    for name in public_modules():
        module = importlib.import_module(name)
        for cls in vars(module).values():
            if inspect.isclass(cls) and dataclasses.is_dataclass(cls) and cls.__module__ == name:
                out += [(f"{name}.{cls.__name__}", f.name, str(f.type)) for f in dataclasses.fields(cls)]
    return out


def test_fields_of_one_concept_have_one_type():
    """Every dataclass field holding an architecture is a str; every field holding a kir
    hash (static hash, launch identity, JIT key, format 1's dynamic hash) is a str of 32
    hex digits — never an int or a Hash128. Mneme's and Proteus's own hashes are theirs
    (decimal numbers) and named so (mneme_*, proteus)."""
    fields = annotated_fields()
    assert len(fields) > 50
    arch = [(c, f, t) for c, f, t in fields if f in ("arch", "target", "device_arch")]
    hashes = [(c, f, t) for c, f, t in fields
              if re.search(r"(static_hash|launch_identity|jit_key|dynamic_hash|^key$|^identity$)", f)
              and not c.startswith("kir.mneme.")]
    assert arch and hashes
    assert [x for x in arch if x[2] not in ("str", "str | None")] == []
    assert [x for x in hashes if x[2] not in ("str", "str | None")] == []


def test_the_hook_and_the_record_agree_on_types():
    from kir import hook, record
    hook_fields = {f.name: str(f.type) for f in dataclasses.fields(hook.Kernel)}
    record_fields = {f.name: str(f.type) for f in dataclasses.fields(record.Kernel)}
    for name in set(hook_fields) & set(record_fields):
        assert hook_fields[name] == record_fields[name] or name in ("params", "jit_args", "ir"), name
    assert hook_fields["static_hash"] == record_fields["static_hash"] == "str"


def test_a_hash128_is_its_hex_string():
    """Hash128 (what the core's hash functions return) equals, and hashes as, the 32
    hex digits the rest of the API carries: either finds the other in a dict or set."""
    from kir.hashing import Hash128, static_hash
    h = static_hash("_Z1kv", "ptx", [b"code"])
    text = h.hex
    assert h == text and text == h and not h != text
    assert {text: 1}[h] == 1 and {h: 2}[text] == 2 and len({h, text}) == 1
    assert h != text.upper() and h != "" and h != None and h != 0 and not (h == 0)  # noqa: E711
    assert Hash128.from_hex(text) == h


def test_the_obvious_hash_calls_work_or_raise(built, kir_cli):
    """Issue 26: kernel_static_hash(image.code, name) returned None unless
    load_code(digests=True) had run, and kernel_hashes' (list, errors) made the common
    case awkward. Each answer is checked against `kir hash --json`."""
    from kir.hashing import kernel_static_hash, static_hashes
    app = built["app"]
    printed = {(j["kernel"], j["image"]): j["static"] for j in
               map(json.loads, kir_cli("hash", "--jsonl", app).stdout.splitlines())}
    assert printed
    binary = kir.open(app)
    for (name, index), expected in printed.items():
        image = binary.images[index]
        assert kernel_static_hash(image.code, name).hex == expected == image.static_hash(name)
    assert {(h.kernel, h.image): h.static_hash for h in static_hashes(binary)} == printed
    scale = static_hashes(binary, kernel="scale<float>")  # mangled or demangled, kir's dialect
    assert scale and {h.kernel for h in scale} == {"_Z5scaleIfEvPT_S0_6Params"}
    # Decoded without the digest: a precise error, not None.
    other = kir.open(app)
    cubin = next(i for i in other.images if i.kind == "cubin" and i.index in {ix for _, ix in printed})
    other.load_code([cubin])
    name = cubin._code.kernels[0].name
    with pytest.raises(kir.KirError, match="digest was not computed"):
        kernel_static_hash(cubin._code, name)
    with pytest.raises(kir.KirError, match="no kernel 'nope' in this code"):
        binary.images[cubin.index].static_hash("nope")
