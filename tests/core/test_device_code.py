"""Kernels, parameters and globals: the cubin's .nv.info against the PTX text
(two independent descriptions of the same kernels, produced by different tools)."""
from __future__ import annotations

import pytest

import kir


def by_arch_kind(binary):
    return {(i.arch, i.kind): i for i in binary.images}


@pytest.mark.parametrize("name", ["app", "app_compress_size", "kernels_dc.o", "libkernels.so"])
def test_cubin_params_match_ptx(built, name):
    images = by_arch_kind(kir.open(built[name]))
    cubin, ptx = images[("sm_90", "cubin")], images[("sm_90", "ptx")]
    from_ptx = {k.name: k for k in ptx.kernels}
    assert {k.name for k in cubin.kernels} == set(from_ptx)
    for k in cubin.kernels:
        p = from_ptx[k.name]
        assert [(x.ordinal, x.offset, x.size) for x in k.params] == \
               [(x.ordinal, x.offset, x.size) for x in p.params], k.name
        assert k.param_bytes == p.param_bytes, k.name


def test_kernel_attributes(built):
    images = by_arch_kind(kir.open(built["app"]))
    kernels = {k.demangled: k for k in images[("sm_90", "cubin")].kernels}
    assert kernels["bounded(float*)"].max_threads == [256, 1, 1]
    assert kernels["clustered(float*)"].cluster_dims == [2, 1, 1]
    assert kernels["no_params()"].params == []
    # Static shared memory: 128 doubles / floats of staging (sm_75 reserves none;
    # sm_90 adds 1 KiB of system shared memory, as cuobjdump -res-usage also reports).
    sm75 = {k.demangled: k for k in images[("sm_75", "cubin")].kernels}
    assert sm75["void scale<double>(double*, double, Params)"].shared_bytes == 128 * 8
    assert sm75["void scale<float>(float*, float, Params)"].shared_bytes == 128 * 4
    # clustered() exists only where __CUDA_ARCH__ >= 900.
    sm75 = {k.demangled for k in images[("sm_75", "cubin")].kernels}
    assert "clustered(float*)" not in sm75 and "axpy(float, float const*, float*, int)" in sm75


def test_globals(built):
    images = by_arch_kind(kir.open(built["app"]))
    cubin = {g.name: g for g in images[("sm_90", "cubin")].code.globals}
    ptx = {g.name: g for g in images[("sm_90", "ptx")].code.globals}
    assert set(cubin) == set(ptx) == {"counter", "table", "coefficients"}
    for name in cubin:
        assert cubin[name].size == ptx[name].size
    assert cubin["coefficients"].section.startswith(".nv.constant")


def test_rdc_functions_are_not_kernels(built):
    images = [i for i in kir.open(built["librdc.a"]).images if i.kind == "cubin"]
    b_sm90 = [i for i in images if i.container.member == "rdc_b.o" and i.arch == "sm_90"][0]
    assert [k.name for k in b_sm90.kernels] == ["_Z5resetv"]
    assert "_Z14twice_plus_onef" in b_sm90.code.functions


def test_read_matches_payload_when_plain(built):
    for image in kir.open(built["app_compress_none"]).images:
        if image.compression == "none":
            data = image.read()
            assert len(data) == image.size == image.stored_size
            raw = built["app_compress_none"].read_bytes()
            off = image.entry.payload_file_offset
            assert data == raw[off:off + len(data)]


def test_lto_ir_is_listed_and_obfuscated(built):
    lto = [i for i in kir.open(built["app"]).images if i.kind == "lto-ir"]
    assert len(lto) == 1 and lto[0].arch == "sm_90"
    assert lto[0].obfuscated and "obfuscated" in lto[0].entry.flag_names
    assert lto[0].kernels == []
    with pytest.raises(kir.KirError, match="obfuscated"):
        lto[0].read()


@pytest.mark.parametrize("mode,ptx,cubin", [
    ("none", "none", "none"), ("default", "zstd", "none"), ("balance", "zstd", "none"),
    ("size", "zstd", "zstd"), ("speed", "lz4", "none"),
])
def test_compression_modes(built, mode, ptx, cubin):
    b = kir.open(built[f"app_compress_{mode}"])
    user = b.containers[-1]  # the first container holds cudart's own kernels
    kinds = {i.kind: i.compression for i in user.images}
    assert kinds == {"ptx": ptx, "cubin": cubin}
    for image in user.images:
        assert len(image.read()) == image.size


def test_compress_all(built):
    b = kir.open(built["app_compress_all"])
    assert {i.compression for i in b.containers[-1].images} == {"zstd"}


def test_kernel_rows_are_the_kernels_fields(built):
    """`kir inspect --kernels` renders from DeviceCode.kernel_rows (plain values
    built by the core, issue 15): they hold exactly what the Kernel objects hold,
    for every kernel of several real binaries."""
    import kir
    checked = 0
    for name in ("kernels.fatbin", "app", "libkernels.so", "hip_app"):
        if name not in built:
            continue
        for image in kir.open(built[name]).images:
            code = image.code
            expected = [(k.name, k.demangled, len(k.params), "".join(f" {p.offset}:{p.size}" for p in k.params),
                         k.registers, k.shared_bytes) for k in code.kernels]
            assert code.kernel_rows() == expected, (name, image.core.index)
            checked += len(expected)
    assert checked >= 8

