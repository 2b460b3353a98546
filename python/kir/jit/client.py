"""The reference JIT client's settings (libkir_jit.so, libkir/jit/client.cpp):
the KIR_JIT_* variables it reads, built from `kir run`'s options and checked
here. Its CONFIG records come from the same `kir.jit.Options.config()` that
`kir jit compile` keys its cache entries with, so both sides compute one key."""
from __future__ import annotations

from pathlib import Path

from kir.errors import OptionError
from kir.jit import Options

__all__ = ["client_environment"]


def client_environment(cache: Path | str, options: Options | None = None, *, all_kernels: bool = False,
                       specialize_grid: bool = False, specialize_block: bool = False,
                       bounds: tuple[int, int] | None = None, stats: Path | str | None = None,
                       recheck_ms: int | None = None) -> dict[str, str]:
    """The variables for these settings (KIR_HOOK_CLIENTS is the caller's)."""
    options = options or Options()
    env = {"KIR_JIT_CACHE": str(Path(cache).resolve()),
           "KIR_JIT_CONFIG": ",".join(f"{key}={value.hex()}" for key, value in options.config())}
    for key, _ in options.config():
        if "," in key or "=" in key:
            raise OptionError(f"CONFIG key {key!r}: ',' and '=' cannot be passed to the client")
    if all_kernels:
        env["KIR_JIT_ALL"] = "1"
    if specialize_grid or specialize_block:
        env["KIR_JIT_SPECIALIZE"] = ",".join(n for n, on in (("grid", specialize_grid),
                                                             ("block", specialize_block)) if on)
    if bounds is not None:
        max_threads, min_blocks = bounds
        if max_threads <= 0 or min_blocks < 0:
            raise OptionError(f"--bounds {max_threads},{min_blocks}: expected MAXT > 0 and MINB >= 0")
        env["KIR_JIT_BOUNDS"] = f"{max_threads},{min_blocks}"
    if stats is not None:
        env["KIR_JIT_STATS"] = str(stats)
    if recheck_ms is not None:
        if recheck_ms < 0:
            raise OptionError(f"recheck {recheck_ms}: expected milliseconds >= 0")
        env["KIR_JIT_RECHECK_MS"] = str(recheck_ms)
    return env
