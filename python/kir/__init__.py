"""kir — find, hash and hook the GPU code inside binaries.

Open a binary and walk what it holds::

    import kir
    binary = kir.open("app")
    for image in binary.images:
        print(image.kind, image.arch, image.size)
        for kernel in image.kernels:
            print(kernel.name, [(p.offset, p.size) for p in kernel.params])
"""
# the running libkir's kir/kir.h and kir/cache.h ABI versions (docs/abi.md: what each added)
from kir._core import (  # libkir's C ABI (libkir.so.N), kir/hooks.h's API
    DeviceCode,
    DeviceGlobal,
    Kernel,
    __version__,
    abi_version,
    c_abi_version,
    cache_abi_version,
    demangle,
    hook_api_version,
    parse_code_object,  # noqa: F401 (public: kir.parse_*)
    parse_cubin,  # noqa: F401
    parse_ptx,  # noqa: F401
)
from kir.binary import Binary, Container, Image, open
from kir.errors import KirError
from kir.model import AllocationKind, CodeKind, ImageKind, Param, TargetKind

#: A kernel parameter's layout: kir.model.Param, the one type every kernel's `params` lists.
KernelParam = Param

__all__ = [
    "AllocationKind", "Binary", "CodeKind", "Container", "DeviceCode", "DeviceGlobal", "Image",
    "ImageKind", "Kernel", "KernelParam", "Param", "KirError", "TargetKind", "__version__", "abi_version",
    "demangle", "c_abi_version", "cache_abi_version", "cmake_dir", "docs_dir", "hook_api_version", "open",
]


def docs_dir() -> str:
    """Directory holding kir's documentation and JSON schemas (`docs/json-schema.md`,
    `docs/schemas/*.schema.json`), inside this installation (a wheel ships them)."""
    import os
    return os.path.join(os.path.dirname(__file__), "docs")


def cmake_dir() -> str:
    """Directory holding kir's CMake package (for -Dkir_DIR=...), inside this installation."""
    import os
    return os.path.join(os.path.dirname(__file__), "lib", "cmake", "kir")
