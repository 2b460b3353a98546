"""The exceptions kir raises, one hierarchy: every error the library raises for
bad input — a damaged binary or record, an option value it cannot use, a record
it cannot replay — is a `KirError`, whose message says what, where and (for
bytes) at which offset. The CLI prints a KirError as `kir: error: MESSAGE` and
exits 2; anything else is a bug and shows its traceback.

    KirError                 a binary could not be read (raised by the core too)
    ├── OptionError          an option or argument value is invalid (also a ValueError)
    ├── RecordError          a record or chunk is missing, damaged or of an unknown version
    ├── MnemeError           a Mneme recording (kir import-mneme) is missing or malformed
    ├── PlanError            a record cannot be replayed as asked
    ├── ReplayError          the driver refused a step of a replay
    │   └── NoDeviceError    no CUDA driver or device to replay on
    ├── DistributedError     Dask is missing, or a cluster cannot be started or reached
    └── LLVMCrashError       LLVM died on IR from the input (in kir's worker process: kir/_irworker.py)

A missing optional dependency is a KirError made by `missing_extra`, naming the
extra that installs it: pip install '<distribution>[replay]', with the name the
distribution is installed under.
"""


class KirError(Exception):
    """Bad input: the message says what, where and at which byte offset."""


class OptionError(KirError, ValueError):
    """An option or argument value is invalid: the message names the option."""


class RecordError(KirError):
    """A record or chunk is missing, damaged or of an unknown version: the message says
    which file, which chunk and what is wrong."""


class MnemeError(KirError):
    """A Mneme recording kir cannot import: the message names the file and the byte
    offset (snapshots) or the field (JSON)."""


class PlanError(KirError):
    """The record cannot be replayed as asked (no such code, wrong architecture, ...)."""


class ReplayError(KirError):
    """The driver refused a step of the replay: the message names the call and its error."""


class NoDeviceError(ReplayError):
    """No CUDA driver or device to replay on."""


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


def missing_extra(module: str, extra: str, needed_by: str, error: BaseException | None = None,
                  cls: type[KirError] = KirError) -> KirError:
    """The error for an optional dependency that is not installed: it names what needs
    it, the module, and the extra that installs it, e.g.
    `kir tune: optuna is not installed: pip install '<distribution>[tune]'`.
    Raise it `from None`: `error` (the ImportError) is summarized in the message."""
    detail = f" ({error})" if error is not None and str(error) else ""
    return cls(f"{needed_by}: {module} is not installed: {install_hint(extra)}{detail}")


__all__ = ["DISTRIBUTION", "DistributedError", "KirError", "LLVMCrashError", "MnemeError", "NoDeviceError", "OptionError", "PlanError", "RecordError",
           "ReplayError", "distribution_name", "install_hint", "missing_extra"]
