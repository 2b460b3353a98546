"""`kir hash --proteus` reproduces what Proteus's runtime computes, kernel by kernel,
checked against tests/support/proteus_reference.py (written from Proteus's sources) on the
Proteus-layout fixtures: non-RDC CUDA and HIP, CUDA and HIP relocatable device code.
The inputs of the reference come from the fixtures' own files (the modules they
embedded, the code objects they built) and, for the CUDA registration order, from
running the RDC program: each unit's constructor prints its module id."""
from __future__ import annotations

import json
import re
import subprocess

import pytest

import hash_reference as canonical
import kir
import proteus_reference as ref
from kir import hashing


def work(built, name):
    return built[name].parent / f".{name}.work"


def proteus_lines(kir_cli, path, *args) -> dict[tuple[int, str], int | None]:
    result = kir_cli("hash", "--proteus", "--jsonl", *args, path)
    assert result.returncode == 0, result.stderr
    return {(h["image"], h["kernel"]): h["proteus"] for h in map(json.loads, result.stdout.splitlines())}


def text_lines(kir_cli, path) -> dict[tuple[int, str], str]:
    result = kir_cli("hash", "--proteus", path)
    assert result.returncode == 0, result.stderr
    out = {}
    for line in result.stdout.splitlines():
        value, _target, _, image, kernel = line.split()
        out[(int(image.lstrip("#")), kernel)] = value
    return out


def marked_jit(bitcode_path) -> set[str]:
    """Kernels a module marks for Proteus: `!proteus.jit` on the definition, or a
    "jit" entry of @llvm.global.annotations (read from llvm-dis-22's text)."""
    text = subprocess.run(["llvm-dis-22", bitcode_path, "-o", "-"], capture_output=True, text=True,
                          check=True).stdout
    names = set(re.findall(r"^define [^@]*@([\w.$]+)\(.*!proteus\.jit", text, re.M))
    table = re.search(r"^@llvm\.global\.annotations = .*$", text, re.M)
    if table:
        jit_labels = {m for m in re.findall(r'^(@[\w.$]+) = .*c"jit\\00"', text, re.M)}
        for fn, label in re.findall(r"@([\w.$]+)(?: to [^,]*\))?, ptr(?: addrspace\(\d+\))? (@[\w.$]+)",
                                    table[0]):
            if label in jit_labels:
                names.add(fn)
    return names


def check(kir_cli, path, expected: dict[tuple[int, str], int]):
    got = proteus_lines(kir_cli, path)
    assert set(expected) <= set(got), set(expected) - set(got)
    for key, value in got.items():
        assert value == expected.get(key), key  # None ('-') for every kernel Proteus does not hash
    texts = text_lines(kir_cli, path)
    for key, value in got.items():
        assert texts[key] == ("-" if value is None else str(value))


@pytest.mark.parametrize("llvm20", [True, False])
def test_proteus_cuda(built, kir_cli, llvm20):
    module_path = work(built, "proteus_cuda") / "dev.bc"
    module = module_path.read_bytes()
    jit = marked_jit(module_path)
    assert jit == {"_Z4axpyfPKfPfi"}
    module_hash = ref.cuda_module_hash([module], llvm20)
    binary = kir.open(built["proteus_cuda"])
    # Every image holding the kernel (the sm_90 cubin and the PTX: Proteus reads the
    # global from whichever the driver loads, the same bytes).
    expected = {(i.index, k): ref.static_hash(k, module_hash, llvm20)
                for i in binary.images for k in jit if k in {x.name for x in i.kernels}}
    assert {binary.images[i].kind for i, _ in expected} == {"cubin", "ptx"}
    got = proteus_lines(kir_cli, built["proteus_cuda"], *([] if llvm20 else ["--llvm-before-20"]))
    assert {k: v for k, v in got.items() if v is not None} == expected
    assert got[next(k for k in got if k[1] == "_Z13proteus_touchPhi")] is None  # not a JIT kernel


def registration_order(built) -> list[str]:
    """Run the RDC program: its units' constructors print their module ids in the
    order they run, the order of Proteus's __proteus_register_linked_binary calls."""
    out = subprocess.run([built["proteus_cuda_rdc"]], capture_output=True, text=True, check=True).stdout
    return re.findall(r"^register (\S+)$", out, re.M)


def test_proteus_cuda_rdc(built, kir_cli):
    order = registration_order(built)
    assert order == ["_jit_bitcode_tu_b_803_1a2b3c", "_jit_bitcode_tu_a_803_1a2b3c"]
    modules = {f"_jit_bitcode_tu_{u}_803_1a2b3c": work(built, "proteus_cuda_rdc") / f"{u}.bc" for u in "ab"}
    module_hash = ref.cuda_module_hash([modules[m].read_bytes() for m in order])
    jit = marked_jit(modules[order[0]]) | marked_jit(modules[order[1]])
    assert jit == {"_Z9rdc_scalePfi", "_Z8rdc_filliPf"}
    binary = kir.open(built["proteus_cuda_rdc"])
    [linked] = [i for i in binary.images if i.container.section == ".nv_fatbin" and i.code.ir]
    # The linked cubin lists the modules in device-link order (A, B), not B, A.
    assert [m.name for m in linked.code.ir] == order[::-1]
    expected = {(linked.index, k): ref.static_hash(k, module_hash) for k in jit}
    check(kir_cli, built["proteus_cuda_rdc"], expected)
    # The device-link order would give another value: the order matters.
    assert ref.cuda_module_hash([modules[m].read_bytes() for m in order[::-1]]) != module_hash


@pytest.mark.parametrize("name", ["proteus_hip.o", "proteus_hip_rdc.o"])
def test_proteus_hip(built, kir_cli, name):
    code_object = work(built, name) / "k_jit.co"
    sections = ref.hip_section_names(code_object)
    jit_sections = [s for s in sections if s.startswith(".jit.bitcode")]
    assert len(jit_sections) == 2
    module_hash = ref.hip_module_hash(sections)
    # JIT kernels: those the embedded modules mark, and those with a per-kernel section.
    per_kernel = {s.split(".")[3] for s in jit_sections if s.split(".")[3] != "tu"}
    modules = [p for p in work(built, name).glob("*.bc") if not p.name.endswith("0.bc")]
    jit = per_kernel | set().union(*(marked_jit(p) for p in modules))
    [image] = [i for i in kir.open(built[name]).images if i.kind == "code-object"]
    names = {k.name for k in image.kernels}
    expected = {(image.index, k): ref.static_hash(k, module_hash) for k in jit & names}
    assert len(expected) == 2 and len(names) > len(expected)  # JIT kernels and others
    check(kir_cli, built[name], expected)


def test_non_jit_binary_prints_dashes(built, kir_cli):
    lines = text_lines(kir_cli, built["app"])
    assert lines and set(lines.values()) == {"-"}


def test_canonical_static_hash_of_rdc_fixtures(built, kir_cli):
    """kir's own static hash (docs/hashing.md rules): CUDA RDC kernels of the linked
    image cover every unit's module (rule 2); HIP RDC: a kernel's own section (rule 1),
    else the image (no unit module there: rule 3)."""
    result = kir_cli("hash", "--jsonl", built["proteus_cuda_rdc"])
    modules = [(work(built, "proteus_cuda_rdc") / f"{u}.bc").read_bytes() for u in "ab"]
    binary = kir.open(built["proteus_cuda_rdc"])
    [linked] = [i for i in binary.images if i.container.section == ".nv_fatbin" and i.code.ir]
    lines = [h for h in map(json.loads, result.stdout.splitlines()) if h["image"] == linked.index]
    assert len(lines) == 6
    for h in lines:
        assert h["code"] == "ir" and h["static"] == canonical.static_hash(h["kernel"], "ir", modules)

    result = kir_cli("hash", "--jsonl", built["proteus_hip_rdc.o"])
    [image] = [i for i in kir.open(built["proteus_hip_rdc.o"]).images if i.kind == "code-object"]
    own = {"_Z9rdc_scalePfi": "a.bc", "_Z8rdc_filliPf": "b.bc"}
    lines = list(map(json.loads, result.stdout.splitlines()))
    assert len(lines) == 4
    for h in lines:
        if h["kernel"] in own:
            module = (work(built, "proteus_hip_rdc.o") / own[h["kernel"]]).read_bytes()
            assert h["code"] == "ir" and h["static"] == canonical.static_hash(h["kernel"], "ir", [module])
        else:
            assert h["code"] == "code-object"
            assert h["static"] == canonical.static_hash(h["kernel"], "code-object", [image.read()])


def test_ptx_carries_the_embedded_module(built):
    """The PTX image of proteus_cuda holds the same module as the cubin (`.global .b8
    _jit_bitcode_…[N] = {…}`; nvcc leaves trailing zeros out)."""
    module = (work(built, "proteus_cuda") / "dev.bc").read_bytes()
    images = [i for i in kir.open(built["proteus_cuda"]).images if i.code.ir]
    assert {i.kind for i in images} == {"cubin", "ptx"}
    for image in images:
        [m] = image.code.ir
        assert m.name == "_jit_bitcode_tu_803_1a2b3c" and m.bitcode == module


@pytest.mark.parametrize("initializer,message", [
    (" {66, 67, 300};\n", "value out of the range of .b8"),
    (" {66, 67, 1, 2};\n", "more than the 3 values declared"),
    (" {66; 67};\n", "expected ',' or '}'"),
    (" {66, , 67};\n", "expected a decimal byte value"),
    (" {66, 67", "no closing '}'"),
    (" 66;\n", "expected '{'"),
])
def test_malformed_ptx_module_initializer(initializer, message):
    head = ".version 8.0\n.target sm_90\n.address_size 64\n"
    text = head + ".visible .global .align 1 .b8 _jit_bitcode_tu_x[3] =" + initializer
    with pytest.raises(kir.KirError) as error:
        kir.parse_ptx(text.encode())
    assert message in str(error.value) and "_jit_bitcode_tu_x" in str(error.value)
    assert "at byte" in str(error.value)
    # Not a module global: an ordinary initializer is not read as IR.
    ok = kir.parse_ptx((head + ".visible .global .align 1 .b8 table[3] =" + initializer).encode())
    assert ok.ir == []


def test_ptx_module_short_initializer_is_zero_filled():
    text = (".version 8.0\n.target sm_90\n.address_size 64\n"
            ".visible .global .align 1 .b8 _jit_bitcode_tu_x[5] = {66, 67};\n")
    [m] = kir.parse_ptx(text.encode()).ir
    assert m.bitcode == b"BC\0\0\0" and m.digest == hashing.xxh3_128(b"BC\0\0\0")
