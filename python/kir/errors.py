"""The exceptions kir raises, one hierarchy: every error the library raises for
bad input — a damaged binary or record, an option value it cannot use, a record
it cannot replay — is a `KirError`, whose message says what, where and (for
bytes) at which offset. The CLI prints a KirError as `kir: error: MESSAGE` and
exits 2; anything else is a bug and shows its traceback::

    KirError                 a binary could not be read (raised by the core too)
    ├── (one class per ErrorCode, raised by the core: BadMagicError, TruncatedError,
    │    OutOfBoundsError, MalformedError, UnsupportedVersionError, UnsupportedError,
    │    CorruptError, TooLargeError, KirIOError, PermissionRefusedError, NotFoundError,
    │    InvalidArgumentError, InternalError: see ErrorCode)
    ├── OptionError          an option or argument value is invalid (also a ValueError)
    ├── RecordError          a record or chunk is missing, damaged or of an unknown version
    ├── MnemeError           a Mneme recording (kir import-mneme) is missing or malformed
    ├── OmpRecordError       an LLVM OpenMP kernel record (kir import-omp) is missing or malformed
    ├── PlanError            a record cannot be replayed as asked
    ├── ReplayError          the driver refused a step of a replay
    │   └── NoDeviceError    no CUDA driver or device to replay on
    ├── DistributedError     Dask is missing, or a cluster cannot be started or reached
    └── LLVMCrashError       LLVM died on IR from the input (in kir's worker process: kir/_irworker.py)

Every KirError has `.code` (an ErrorCode; None for the classes the Python layers raise)
and `.offset` (the byte offset the error is about, in the file or buffer read; None when
unknown). The core's codes are kir.h's KIR_ERROR_* (docs/abi.md); `except KirError`
catches them all.

A missing optional dependency is a KirError made by `missing_extra`, naming the
extra that installs it: pip install '<distribution>[replay]', with the name the
distribution is installed under.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """What kind of failure an error from the core is: kir.h's KIR_ERROR_* numbers
    (kir/support/error.hpp ErrorCode; checked when kir._core loads)."""
    NONE = 0
    BAD_MAGIC = 1            # not the format asked for: wrong or no magic
    TRUNCATED = 2            # the data ends inside a structure that must be whole
    OUT_OF_BOUNDS = 3        # an offset, size, count or index points outside its buffer
    MALFORMED = 4            # a field holds a value the format does not allow
    UNSUPPORTED_VERSION = 5  # a format version this kir does not read
    UNSUPPORTED = 6          # valid, but not read by kir (ELF32, an unknown codec)
    CORRUPT = 7              # a checksum or hash does not match the bytes
    TOO_LARGE = 8            # over a limit kir enforces
    IO = 9                   # the system failed a read, write, open or map
    PERMISSION = 10          # refused by permissions or by kir's trust rules
    NOT_FOUND = 11           # no such file, group, image, kernel, entry
    INVALID_ARGUMENT = 12    # the caller's mistake
    INTERNAL = 13            # anything else


class KirError(Exception):
    """Bad input: the message says what, where and at which byte offset. `.code`: the
    ErrorCode (None when a Python layer raised it); `.offset`: the byte offset the
    error is about, or None."""
    code: ErrorCode | None = None
    offset: int | None = None


class BadMagicError(KirError):
    """Not the format asked for: no magic, a wrong magic, an unrecognized file."""
    code = ErrorCode.BAD_MAGIC


class TruncatedError(KirError):
    """The data ends inside a structure that must be whole (a header, a record)."""
    code = ErrorCode.TRUNCATED


class OutOfBoundsError(KirError):
    """An offset, size, count or index in the data points outside its buffer."""
    code = ErrorCode.OUT_OF_BOUNDS


class MalformedError(KirError):
    """A field holds a value the format does not allow."""
    code = ErrorCode.MALFORMED


class UnsupportedVersionError(KirError):
    """A format version this kir does not read."""
    code = ErrorCode.UNSUPPORTED_VERSION


class UnsupportedError(KirError):
    """Valid, but not something kir reads (ELF32, an unknown codec, obfuscated code)."""
    code = ErrorCode.UNSUPPORTED


class CorruptError(KirError):
    """A checksum or hash does not match the bytes: damaged after it was written."""
    code = ErrorCode.CORRUPT


class TooLargeError(KirError):
    """Over a limit kir enforces (a decompressed size, a count)."""
    code = ErrorCode.TOO_LARGE


class KirIOError(KirError):
    """The operating system failed a read, write, open or map."""
    code = ErrorCode.IO


class PermissionRefusedError(KirError):
    """Refused by the system's permissions or by kir's trust rules (a cache directory
    or entry another user could write)."""
    code = ErrorCode.PERMISSION


class NotFoundError(KirError):
    """No such file, group, image, kernel or entry."""
    code = ErrorCode.NOT_FOUND


class InvalidArgumentError(KirError):
    """The caller's mistake: a NULL pointer, an index out of range, a bad value."""
    code = ErrorCode.INVALID_ARGUMENT


class InternalError(KirError):
    """Anything else: a device driver's or a library's failure."""
    code = ErrorCode.INTERNAL


_BY_CODE: dict[ErrorCode, type[KirError]] = {cls.code: cls for cls in (
    BadMagicError, TruncatedError, OutOfBoundsError, MalformedError, UnsupportedVersionError, UnsupportedError,
    CorruptError, TooLargeError, KirIOError, PermissionRefusedError, NotFoundError, InvalidArgumentError,
    InternalError)}


def error_class(code: int) -> type[KirError]:
    """The KirError subclass of ErrorCode `code` (KirError itself for NONE or a code this
    package does not know)."""
    try:
        return _BY_CODE.get(ErrorCode(code), KirError)
    except ValueError:
        return KirError


class OptionError(KirError, ValueError):
    """An option or argument value is invalid: the message names the option."""


class RecordError(KirError):
    """A record or chunk is missing, damaged or of an unknown version: the message says
    which file, which chunk and what is wrong."""


class MnemeError(KirError):
    """A Mneme recording kir cannot import: the message names the file and the byte
    offset (snapshots) or the field (JSON)."""


class OmpRecordError(KirError):
    """An LLVM OpenMP kernel record (LIBOMPTARGET_RECORD) kir cannot import: the
    message names the file and the byte offset (.globals, .memory) or the field (JSON)."""


class PlanError(KirError):
    """The record cannot be replayed as asked (no such code, wrong architecture, ...)."""


class ReplayError(KirError):
    """The driver refused a step of the replay: the message names the call and its error."""


class NoDeviceError(ReplayError):
    """No CUDA driver or device to replay on."""


#: The CUDA driver's sticky errors (cuda.h, CUresult: "the context cannot be used
#: anymore" / "the process must be terminated and relaunched"): after one, every call
#: of this process on the device fails the same way.
STICKY_CUDA_ERRORS = {
    700: "CUDA_ERROR_ILLEGAL_ADDRESS", 702: "CUDA_ERROR_LAUNCH_TIMEOUT", 710: "CUDA_ERROR_ASSERT",
    714: "CUDA_ERROR_HARDWARE_STACK_ERROR", 715: "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    716: "CUDA_ERROR_MISALIGNED_ADDRESS", 717: "CUDA_ERROR_INVALID_ADDRESS_SPACE", 718: "CUDA_ERROR_INVALID_PC",
    719: "CUDA_ERROR_LAUNCH_FAILED", 721: "CUDA_ERROR_TENSOR_MEMORY_LEAK", 810: "CUDA_ERROR_MPS_CLIENT_TERMINATED",
    911: "CUDA_ERROR_EXTERNAL_DEVICE",
}


class DeviceFaultError(ReplayError):
    """A sticky CUDA error (STICKY_CUDA_ERRORS; `code`): the device context of this
    process is dead, so nothing more can run on the GPU here; `kir replay --all`
    replays the remaining records in a fresh process (kir.replay.batch)."""

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


class DistributedError(KirError):
    """Dask is not installed, or the cluster cannot be started or reached (kir.distribute)."""


class LLVMCrashError(KirError):
    """LLVM crashed, ended or hung on IR from the input, in kir's worker process
    (kir/_irworker.py): the message says how, with LLVM's own line."""


#: The distribution's name when no installed metadata names it (run from a source tree).
DISTRIBUTION = "kir-kernel-ir"


def distribution_name() -> str:
    """The name of the distribution that installed the `kir` package (what `pip install`
    takes), read from the installed metadata; DISTRIBUTION when it cannot be read."""
    from importlib import metadata
    try:
        names = metadata.packages_distributions().get("kir")
    except Exception:  # damaged metadata of some other distribution: not worth failing over
        names = None
    return names[0] if names else DISTRIBUTION


def install_hint(extra: str) -> str:
    """pip install '<distribution>[extra]', with this installation's distribution name."""
    return f"pip install '{distribution_name()}[{extra}]'"


def llvmlite_installed() -> bool:
    """Whether llvmlite (the `ir` extra) can be imported, without importing it."""
    import importlib.util
    try:
        return importlib.util.find_spec("llvmlite") is not None
    except (ImportError, ValueError):  # ValueError: a None in sys.modules (a module known absent)
        return False


def missing_extra(module: str, extra: str, needed_by: str, error: BaseException | None = None,
                  cls: type[KirError] = KirError) -> KirError:
    """The error for an optional dependency that is not installed: it names what needs
    it, the module, and the extra that installs it, e.g.
    `kir tune: optuna is not installed: pip install '<distribution>[tune]'`.
    Raise it `from None`: `error` (the ImportError) is summarized in the message."""
    detail = f" ({error})" if error is not None and str(error) else ""
    return cls(f"{needed_by}: {module} is not installed: {install_hint(extra)}{detail}")


__all__ = ["DISTRIBUTION", "BadMagicError", "CorruptError", "DeviceFaultError", "DistributedError", "ErrorCode", "InternalError",
           "InvalidArgumentError", "KirError", "KirIOError", "LLVMCrashError", "MalformedError", "MnemeError",
           "NoDeviceError", "NotFoundError", "OmpRecordError", "OptionError", "OutOfBoundsError", "PermissionRefusedError", "PlanError",
           "RecordError", "ReplayError", "STICKY_CUDA_ERRORS", "TooLargeError", "TruncatedError", "UnsupportedError",
           "UnsupportedVersionError", "distribution_name", "error_class", "install_hint", "llvmlite_installed",
           "missing_extra"]
