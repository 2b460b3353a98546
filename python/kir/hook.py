"""The hook layer's registry, queried from inside a process it is loaded in
(`LD_PRELOAD=.../kir/lib/libkir_hook.so`, as `kir trace` runs apps, or linked)::

    import kir.hook
    if kir.hook.active():
        for k in kir.hook.kernels(): print(k.name, k.static_hash, k.param_sizes)
        for g in kir.hook.globals_(): print(g.name, g.size, kir.hook.global_device_address(g.host_address))
        kir.hook.find_allocation(pointer)   # -> Allocation (address, size, kind, tag) or None

A thin ctypes view of the C API in `kir/hooks.h`; nothing here loads the hook
into a process that does not already have it.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kir.errors import ErrorCode
from kir.model import AllocationKind, JitArg, Param

LIBRARY = Path(__file__).resolve().parent / "lib" / "libkir_hook.so"
# KIR_ALLOC_* -> kir/model.hpp's AllocationKind names (the layer's trace and the
# recorder's records print those; tests/hook/test_hook_hip.py checks they agree).
ALLOCATION_KINDS = {k.number: k.value for k in (AllocationKind.device, AllocationKind.managed,
                                                AllocationKind.host_pinned)}


class _Hash128(ctypes.Structure):
    _fields_ = [("high", ctypes.c_uint64), ("low", ctypes.c_uint64)]


class _Kernel(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("host_stub", ctypes.c_void_p), ("fatbin", ctypes.c_void_p),
                ("param_count", ctypes.c_uint32), ("param_offsets", ctypes.POINTER(ctypes.c_uint32)),
                ("param_sizes", ctypes.POINTER(ctypes.c_uint32)), ("static_hash", _Hash128),
                ("ir", ctypes.c_void_p), ("ir_size", ctypes.c_size_t), ("unloaded", ctypes.c_int),
                # API 4
                ("jit_arg_count", ctypes.c_uint32), ("jit_args", ctypes.c_void_p),
                # API 6
                ("struct_size", ctypes.c_uint32)]


class _JitArg(ctypes.Structure):  # kir_jit_arg (kir/kir.h)
    _fields_ = [("position", ctypes.c_uint32), ("kind", ctypes.c_uint8), ("type", ctypes.c_uint8),
                ("by_value", ctypes.c_uint8), ("count_type", ctypes.c_uint8), ("count", ctypes.c_uint32),
                ("count_position", ctypes.c_uint32)]


class _Capture(ctypes.Structure):  # kir_jit_capture (kir/kir.h)
    _fields_ = [("lambda", ctypes.c_char_p), ("slot", ctypes.c_uint32), ("offset", ctypes.c_uint32),
                ("type", ctypes.c_uint8), ("value", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Global(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("host_address", ctypes.c_void_p), ("size", ctypes.c_size_t),
                ("fatbin", ctypes.c_void_p), ("unloaded", ctypes.c_int),
                # API 6
                ("struct_size", ctypes.c_uint32)]


class _Allocation(ctypes.Structure):
    _fields_ = [("address", ctypes.c_uint64), ("size", ctypes.c_uint64), ("kind", ctypes.c_int),
                ("tag", ctypes.c_void_p)]


class _Substitute(ctypes.Structure):  # kir_hook_substitute: what a launch_override claims (API 4)
    _fields_ = [("struct_size", ctypes.c_uint32), ("kind", ctypes.c_int), ("result", ctypes.c_int),
                ("function", ctypes.c_void_p), ("code", ctypes.c_void_p), ("code_size", ctypes.c_size_t),
                ("code_kind", ctypes.c_char_p), ("arch", ctypes.c_char_p), ("entry", ctypes.c_char_p),
                ("id", _Hash128),
                # API 6
                ("image_kind", ctypes.c_uint32)]


# These mirror kir/hooks.h field for field (tests/hook/test_hook_abi.py compares them
# with the C compiler's offsetof and sizeof); docs/abi.md says which API added each.
# (kir.hook_api_version is the API they are written for.)


class _Stats(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("fatbins", ctypes.c_uint64), ("kernels", ctypes.c_uint64),
                ("globals", ctypes.c_uint64), ("live_allocations", ctypes.c_uint64),
                ("launches", ctypes.c_uint64), ("failures", ctypes.c_uint64), ("unregistered", ctypes.c_uint64),
                # API 4: the launch override
                ("handled", ctypes.c_uint64), ("substituted", ctypes.c_uint64), ("substitute_loads", ctypes.c_uint64),
                ("substitute_failures", ctypes.c_uint64)]


@dataclass(frozen=True)
class Kernel:
    """A kernel the hook layer has seen registered (kir_hook_kernel, kir/hooks.h)."""
    name: str                      #: mangled
    host_stub: int                 #: the host function (or CUfunction) it is launched by
    fatbin: int                    #: the registration handle or module it came with
    params: tuple[Param, ...]      #: the parameters' layout (kir.model.Param)
    static_hash: str               #: 32 hex digits, as `kir hash` prints it
    ir: bytes                      #: bitcode the Proteus pass embedded for it (b"" when none)
    unloaded: bool = False         #: its fatbin or module was unregistered since
    #: runtime-constant arguments captured from the Proteus ABI (kir_hook_kernel.jit_args), by position
    jit_args: tuple[JitArg, ...] = ()

    @property
    def param_offsets(self) -> tuple[int, ...]:
        """Each parameter's byte offset in the argument buffer."""
        return tuple(p.offset for p in self.params)

    @property
    def param_sizes(self) -> tuple[int, ...]:
        """Each parameter's size in bytes."""
        return tuple(p.size for p in self.params)


@dataclass(frozen=True)
class Global:
    """A device global variable registered with the layer (kir_hook_global, kir/hooks.h)."""
    name: str
    host_address: int              #: the host shadow variable the app uses as its handle
    size: int
    fatbin: int
    unloaded: bool = False         #: its fatbin was unregistered since


@dataclass(frozen=True)
class Capture:
    """A runtime constant a lambda captured (kir_jit_capture; kir_hook_kernel_captures, API 7)."""
    lambda_: str                   #: the lambda's demangled type, as the Proteus pass names it
    slot: int                      #: the capture's index in the closure (RuntimeConstant.Pos)
    offset: int                    #: its byte offset in the closure (RuntimeConstant.Offset)
    type: int                      #: kir_arg_type (kir.model.ArgType's number)
    value: bytes


@dataclass(frozen=True)
class Allocation:
    """A live device allocation the layer tracks (kir_hook_allocation, kir/hooks.h)."""
    address: int
    size: int
    kind: str                      #: "device", "managed" or "host-pinned"
    tag: int                       #: a client's tag (kir_hook_tag_allocation), 0 when none


@lru_cache(maxsize=1)
def _library() -> ctypes.CDLL | None:
    """The hook library already in this process, or None."""
    try:
        lib = ctypes.CDLL(str(LIBRARY), mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
    except OSError:
        try:
            lib = ctypes.CDLL("libkir_hook.so", mode=os.RTLD_NOLOAD | ctypes.RTLD_GLOBAL)
        except OSError:
            return None
    lib.kir_hook_api_version.restype = ctypes.c_uint32
    lib.kir_hook_kernel_count.restype = ctypes.c_size_t
    lib.kir_hook_kernel_at.restype = ctypes.POINTER(_Kernel)
    lib.kir_hook_kernel_at.argtypes = [ctypes.c_size_t]
    lib.kir_hook_global_count.restype = ctypes.c_size_t
    lib.kir_hook_global_at.restype = ctypes.POINTER(_Global)
    lib.kir_hook_global_at.argtypes = [ctypes.c_size_t]
    lib.kir_hook_global_device_address.restype = ctypes.c_uint64
    lib.kir_hook_global_device_address.argtypes = [ctypes.c_void_p]
    lib.kir_hook_find_allocation.argtypes = [ctypes.c_uint64, ctypes.POINTER(_Allocation)]
    lib.kir_hook_track_allocation.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int]
    lib.kir_hook_untrack_allocation.argtypes = [ctypes.c_uint64]
    lib.kir_hook_tag_allocation.argtypes = [ctypes.c_uint64, ctypes.c_void_p]
    lib.kir_hook_failure_count.restype = ctypes.c_uint64
    lib.kir_hook_failure_count.argtypes = [ctypes.c_uint32]
    if hasattr(lib, "kir_hook_kernel_captures"):  # API 7
        lib.kir_hook_kernel_captures.restype = ctypes.c_size_t
        lib.kir_hook_kernel_captures.argtypes = [ctypes.POINTER(_Kernel), ctypes.POINTER(_Capture), ctypes.c_size_t]
        lib.kir_hook_fatbin_globals.restype = ctypes.c_size_t
        lib.kir_hook_fatbin_globals.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.POINTER(_Global)),
                                                ctypes.c_size_t]
    if hasattr(lib, "kir_hook_kernel_proteus_hash"):  # API 10
        lib.kir_hook_kernel_proteus_hash.argtypes = [ctypes.POINTER(_Kernel), ctypes.c_int,
                                                     ctypes.POINTER(ctypes.c_uint64)]
    return lib


def active() -> bool:
    """Whether the hook layer is loaded in this process."""
    return _library() is not None


def api_version() -> int:
    """The hook API of the layer loaded in this process (kir_hook_api_version())."""
    return int(_require().kir_hook_api_version())


def _require() -> ctypes.CDLL:
    lib = _library()
    if lib is None:
        raise RuntimeError("the kir hook layer is not loaded in this process "
                           f"(run it with LD_PRELOAD={LIBRARY}, or under `kir trace`)")
    return lib


def kernels() -> list[Kernel]:
    """Every kernel registered so far, in registration order (unloaded ones too)."""
    lib = _require()
    out = []
    for i in range(lib.kir_hook_kernel_count()):
        k = lib.kir_hook_kernel_at(i).contents
        n = k.param_count
        out.append(Kernel(k.name.decode(), k.host_stub or 0, k.fatbin or 0,
                          tuple(Param(j, k.param_offsets[j], k.param_sizes[j]) for j in range(n)),
                          f"{k.static_hash.high:016x}{k.static_hash.low:016x}",
                          ctypes.string_at(k.ir, k.ir_size) if k.ir else b"", bool(k.unloaded),
                          _jit_args(k)))
    return out


def proteus_hash(name: str, llvm20_or_newer: bool = True) -> int | None:
    """Proteus's 64-bit static hash of the live kernel `name` (mangled) as Proteus's runtime
    computes it for a HIP registration (kir_hook_kernel_proteus_hash, API 10); None when the
    layer has none for it (no such live kernel, no Proteus sections, a CUDA registration)."""
    lib = _require()
    if not hasattr(lib, "kir_hook_kernel_proteus_hash"):
        return None
    for i in reversed(range(lib.kir_hook_kernel_count())):
        k = lib.kir_hook_kernel_at(i)
        if k.contents.name.decode() != name or k.contents.unloaded:
            continue
        out = ctypes.c_uint64()
        return out.value if lib.kir_hook_kernel_proteus_hash(k, int(llvm20_or_newer), ctypes.byref(out)) else None
    return None


def _jit_args(k: _Kernel) -> tuple[JitArg, ...]:
    args = ctypes.cast(k.jit_args, ctypes.POINTER(_JitArg)) if k.jit_args else None
    return tuple(JitArg(a.position, a.kind, a.type, bool(a.by_value), a.count, a.count_type, a.count_position)
                 for a in (args[i] for i in range(k.jit_arg_count if args else 0)))


def globals_() -> list[Global]:
    """Every device variable registered so far, in registration order (unloaded ones too)."""
    lib = _require()
    out = []
    for i in range(lib.kir_hook_global_count()):
        out.append(_global(lib.kir_hook_global_at(i).contents))
    return out


def _global(g: _Global) -> Global:
    return Global(g.name.decode(), g.host_address or 0, g.size, g.fatbin or 0, bool(g.unloaded))


def captures(name: str) -> list[Capture]:
    """The captures of the lambdas the live kernel `name` (mangled) calls, as they are now
    (kir_hook_kernel_captures, API 7); [] when it has none or no such kernel is live."""
    lib = _require()
    for i in reversed(range(lib.kir_hook_kernel_count())):
        k = lib.kir_hook_kernel_at(i)
        if k.contents.name.decode() != name or k.contents.unloaded:
            continue
        n = lib.kir_hook_kernel_captures(k, None, 0)
        out = (_Capture * max(n, 1))()
        n = min(n, lib.kir_hook_kernel_captures(k, out, n))
        return [Capture(getattr(c, "lambda").decode(), c.slot, c.offset, c.type, ctypes.string_at(c.value, c.size))
                for c in out[:n]]
    return []


def fatbin_globals(fatbin: int) -> list[Global]:
    """The device variables of the live registration `fatbin`, each once, in registration
    order (kir_hook_fatbin_globals, API 7)."""
    lib = _require()
    n = lib.kir_hook_fatbin_globals(fatbin, None, 0)
    out = (ctypes.POINTER(_Global) * max(n, 1))()
    n = min(n, lib.kir_hook_fatbin_globals(fatbin, out, n))
    return [_global(out[i].contents) for i in range(n)]


def global_device_address(host_address: int) -> int:
    """The device address of the variable registered with `host_address`,
    resolved through the runtime on first request; 0 when it cannot be."""
    return _require().kir_hook_global_device_address(host_address)


def find_allocation(address: int) -> Allocation | None:
    """The live allocation holding `address`, or None."""
    found = _Allocation()
    if not _require().kir_hook_find_allocation(address, ctypes.byref(found)):
        return None
    return Allocation(found.address, found.size, ALLOCATION_KINDS.get(found.kind, str(found.kind)),
                      found.tag or 0)


def tag_allocation(address: int, tag: int) -> bool:
    """Attach `tag` (a pointer-sized integer) to the live allocation holding
    `address`; False when none holds it."""
    return bool(_require().kir_hook_tag_allocation(address, tag))


def track_allocation(address: int, size: int, kind: str = "device") -> None:
    """Record an allocation the layer cannot see (e.g. a Python-side allocator's)."""
    code = {v: k for k, v in ALLOCATION_KINDS.items()}[kind]
    _require().kir_hook_track_allocation(address, size, code)


def untrack_allocation(address: int) -> None:
    """Forget an allocation `track_allocation` recorded, starting at `address`."""
    _require().kir_hook_untrack_allocation(address)


def stats() -> dict[str, int]:
    """Counts of what the layer has seen: fatbins, kernels, globals (those not unloaded), live
    allocations, launches, failures (items it could not use: KIR_HOOK_LOG=1 names them) and
    unregistered (fatbins and modules unloaded)."""
    s = _Stats(struct_size=ctypes.sizeof(_Stats))
    _require().kir_hook_get_stats(ctypes.byref(s))
    return {name: getattr(s, name) for name, _ in _Stats._fields_[1:]}


def failure_codes() -> dict[ErrorCode, int]:
    """Of stats()["failures"], those that were libkir's own errors (a registration or
    image it could not parse), by their code: {ErrorCode.BAD_MAGIC: 1, ...}, codes
    with none left out (kir_hook_failure_count, API 6)."""
    lib = _require()
    counts = {code: lib.kir_hook_failure_count(code.value) for code in ErrorCode if code != ErrorCode.NONE}
    return {code: n for code, n in counts.items() if n}


__all__ = ["active", "Allocation", "ALLOCATION_KINDS", "api_version", "Capture", "captures", "failure_codes", "proteus_hash",
           "fatbin_globals", "find_allocation", "Global",
           "global_device_address", "globals_", "Kernel", "kernels", "LIBRARY", "stats", "tag_allocation", "track_allocation",
           "untrack_allocation"]
