"""The recorder's settings: the KIR_RECORD_* variables libkir_record.so reads
(docs/recording.md), built from `kir record`'s options and checked here, so a
typo is an OptionError before the app runs rather than a silently ignored
variable. Messages name the options as `kir record` spells them."""
from __future__ import annotations

import re
from pathlib import Path

from kir.errors import OptionError
from kir.kernel_pattern import kernel_pattern

SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def recorder_environment(directory: Path | str, *, kernels: str | None = None, max_per_kernel: int = 4,
                         skip: int = 0, ranks=None, reachable: bool = False, va_base=None, va_size=None,
                         no_va: bool = False) -> dict[str, str]:
    """The variables for these settings. `ranks`: a list of ints or "0,3"; `va_base`:
    an int or a hex string; `va_size`: an int or a size such as "64G"."""
    env = {"KIR_RECORD_DIR": str(directory),
           "KIR_RECORD_MAX_PER_KERNEL": str(non_negative(max_per_kernel, "--max-per-kernel")),
           "KIR_RECORD_SKIP": str(non_negative(skip, "--skip"))}
    if kernels:
        kernel_pattern(kernels)  # compiled as the recorder will (kir.kernel_pattern): refused before the app runs
        env["KIR_RECORD_KERNELS"] = kernels
    if ranks is not None and ranks != "":
        env["KIR_RECORD_RANKS"] = ",".join(str(r) for r in rank_list(ranks))
    if reachable:
        env["KIR_RECORD_REACHABLE"] = "1"
    if no_va and (va_base or va_size):
        raise OptionError("--no-va contradicts --va-base/--va-size")
    if no_va:
        env["KIR_RECORD_NO_VA"] = "1"
    if va_base:
        env["KIR_RECORD_VA_BASE"] = f"{hex_address(va_base):#x}"
    if va_size:
        env["KIR_RECORD_VA_SIZE"] = str(byte_count(va_size))
    return env


def non_negative(n: int, option: str) -> int:
    if n < 0:
        raise OptionError(f"{option} {n}: must not be negative")
    return n


def rank_list(ranks) -> list[int]:
    """[0, 3] or '0,3' -> [0, 3]."""
    if isinstance(ranks, str):
        parts = [p.strip() for p in ranks.split(",")]
        if not all(p.isdigit() for p in parts):
            raise OptionError(f"--ranks {ranks!r}: expected a comma-separated list of ranks, e.g. 0,3")
        return [int(p) for p in parts]
    ranks = list(ranks)
    if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
        raise OptionError(f"--ranks {ranks!r}: expected non-negative integers")
    return ranks


def hex_address(value) -> int:
    """An int, or a hex string ('7f0000000000', '0x7f0000000000'), above 0."""
    if isinstance(value, str):
        try:
            value_int = int(value, 16)
        except ValueError:
            raise OptionError(f"--va-base {value!r}: expected a hex address, e.g. 0x7f0000000000") from None
    else:
        value_int = value
    if value_int <= 0:
        raise OptionError(f"--va-base {value!r}: must be above 0")
    return value_int


def byte_count(value) -> int:
    """An int, or '64G', '512m', '1048576' -> bytes (binary units); above 0."""
    if isinstance(value, int):
        if value <= 0:
            raise OptionError(f"--va-size {value}: must be above 0")
        return value
    match = re.fullmatch(r"(\d+)\s*([kmgt]?)(?:i?b)?", value.strip().lower())
    if not match or int(match.group(1)) == 0:
        raise OptionError(f"--va-size {value!r}: expected a size in bytes, e.g. 68719476736 or 64G")
    return int(match.group(1)) * SUFFIXES[match.group(2)]


__all__ = ["byte_count", "hex_address", "non_negative", "rank_list",
           "recorder_environment", "SUFFIXES"]
