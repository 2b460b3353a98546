"""The reference JIT client's settings (libkir_jit.so, libkir/jit/client.cpp):
the KIR_JIT_* variables it reads, built from `kir run`'s options and checked
here. Its CONFIG records come from the same `kir.jit.Options.config()` that
`kir jit compile` keys its cache entries with, so both sides compute one key."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kir.errors import OptionError
from kir.jit import Options

__all__ = ["PROTEUS_HONOURED", "ProteusSettings", "client_environment", "proteus_settings"]


def client_environment(cache: Path | str, options: Options | None = None, *, all_kernels: bool = False,
                       specialize_grid: bool = False, specialize_block: bool = False,
                       bounds: tuple[int, int] | None = None, stats: Path | str | None = None,
                       recheck_ms: int | None = None, launch_bounds: bool = False, specialize_args: bool = True,
                       service: str | None = None, mode: str | None = None,
                       timeout_ms: int | None = None) -> dict[str, str]:
    """The variables for these settings (KIR_HOOK_CLIENTS is the caller's).
    launch_bounds: the key (and code) take each launch's block size as its launch
    bounds (Proteus's PROTEUS_SPECIALIZE_LAUNCH_BOUNDS); specialize_args=False: no
    argument value; service: the compile service's socket (kir.jit.service); mode:
    sync or async; timeout_ms: how long a sync launch waits for its code."""
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
    if bounds is not None and launch_bounds:
        raise OptionError("--bounds and launch bounds from each launch (PROTEUS_SPECIALIZE_LAUNCH_BOUNDS): one")
    if launch_bounds:
        env["KIR_JIT_BOUNDS"] = "launch"
    if not specialize_args:
        env["KIR_JIT_ARGS"] = "0"
    if service is not None:
        env["KIR_JIT_SERVICE"] = str(service)
    if mode is not None:
        if mode not in ("sync", "async"):
            raise OptionError(f"mode {mode!r}: expected sync or async")
        env["KIR_JIT_MODE"] = mode
    if timeout_ms is not None:
        if timeout_ms <= 0:
            raise OptionError(f"timeout {timeout_ms} ms: expected > 0")
        env["KIR_JIT_TIMEOUT_MS"] = str(timeout_ms)
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


# Proteus's settings (Proteus e587017, src/include/proteus/impl/Config.h: Config() and
# CodeGenerationConfig::createFromEnv; its documentation: docs/user/config.md) that have a
# kir meaning, and what `kir run` does with them (docs/jit.md, "Proteus's settings").
PROTEUS_HONOURED = {
    "PROTEUS_DISABLE": "1: the client looks nothing up and compiles nothing (KIR_JIT_DISABLE)",
    "PROTEUS_ASYNC_COMPILATION": "1: --mode async, 0: sync",
    "PROTEUS_ASYNC_THREADS": "the compile service's processes (--compile-workers), in both modes",
    "PROTEUS_CACHE_DIR": "the cache directory when neither --jit-cache nor KIR_JIT_CACHE names one",
    "PROTEUS_USE_STORED_CACHE": "0: a private cache for this run only, removed at its end",
    "PROTEUS_SPECIALIZE_ARGS": "0: keys and code cover no argument value (KIR_JIT_ARGS=0)",
    "PROTEUS_SPECIALIZE_DIMS": "1: --specialize grid,block, 0: neither",
    "PROTEUS_SPECIALIZE_LAUNCH_BOUNDS": "1: launch bounds = each launch's block size (KIR_JIT_BOUNDS=launch)",
    "PROTEUS_OPT_LEVEL": "-O (0-3; s and z are not kir.jit levels: ignored)",
    "PROTEUS_OPT_PIPELINE": "--pipeline",
    "PROTEUS_CODEGEN_OPT_LEVEL": "--codegen-opt",
}


@dataclass
class ProteusSettings:
    """What the PROTEUS_* variables of an environment ask of `kir run` (None: not set)."""
    disable: bool | None = None
    mode: str | None = None
    workers: int | None = None
    cache: str | None = None
    use_stored_cache: bool | None = None
    specialize_args: bool | None = None
    specialize_dims: bool | None = None
    launch_bounds: bool | None = None
    opt_level: int | None = None
    pipeline: str | None = None
    codegen_opt: int | None = None
    honoured: list[str] = field(default_factory=list)  #: NAME=VALUE of those applied
    ignored: list[str] = field(default_factory=list)   #: NAME=VALUE (why)

    def overridden(self, name: str, by: str) -> None:
        """`name` was set but a kir option or KIR_JIT_* setting wins."""
        for i, text in enumerate(self.honoured):
            if text.split("=", 1)[0] == name:
                self.ignored.append(f"{self.honoured.pop(i)} (overridden by {by})")
                return

    def line(self) -> str | None:
        """The one line `kir run` says at start when any PROTEUS_* variable is set."""
        if not self.honoured and not self.ignored:
            return None
        parts = []
        if self.honoured:
            parts.append("honoured " + ", ".join(self.honoured))
        if self.ignored:
            parts.append("ignored " + ", ".join(self.ignored))
        return "kir: jit: Proteus settings: " + "; ".join(parts) + " (docs/jit.md)"


def proteus_settings(environ) -> ProteusSettings:
    """Read the PROTEUS_* variables as Proteus does (booleans and integers are
    integers: Config.h's getEnvOrDefaultBool/Int use std::stoi); a value Proteus
    would reject is an OptionError here."""
    out = ProteusSettings()

    def integer(name: str, text: str, low: int, high: int | None = None) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise OptionError(f"{name}={text!r}: expected an integer") from None
        if value < low or (high is not None and value > high):
            raise OptionError(f"{name}={text}: expected {low}..{high}" if high is not None
                              else f"{name}={text}: expected >= {low}")
        return value

    def boolean(name: str, text: str) -> bool:
        try:
            return int(text.strip()) != 0
        except ValueError:
            raise OptionError(f"{name}={text!r}: expected 0 or 1") from None

    for name in sorted(n for n in environ if n.startswith("PROTEUS_")):
        text = environ[name]
        said = f"{name}={text}"
        if name not in PROTEUS_HONOURED:
            out.ignored.append(f"{name} (no kir meaning)")
            continue
        if name == "PROTEUS_DISABLE":
            out.disable = boolean(name, text)
        elif name == "PROTEUS_ASYNC_COMPILATION":
            out.mode = "async" if boolean(name, text) else "sync"
        elif name == "PROTEUS_ASYNC_THREADS":
            out.workers = integer(name, text, 1)
        elif name == "PROTEUS_CACHE_DIR":
            out.cache = text or None
        elif name == "PROTEUS_USE_STORED_CACHE":
            out.use_stored_cache = boolean(name, text)
        elif name == "PROTEUS_SPECIALIZE_ARGS":
            out.specialize_args = boolean(name, text)
        elif name == "PROTEUS_SPECIALIZE_DIMS":
            out.specialize_dims = boolean(name, text)
        elif name == "PROTEUS_SPECIALIZE_LAUNCH_BOUNDS":
            out.launch_bounds = boolean(name, text)
        elif name == "PROTEUS_OPT_LEVEL":
            level = text.strip()[:1]  # Proteus reads one character (getEnvOrDefaultChar)
            if level in ("s", "z"):
                out.ignored.append(f"{said} (kir.jit has no -O{level}: -O3)")
                continue
            out.opt_level = integer(name, level, 0, 3)
        elif name == "PROTEUS_OPT_PIPELINE":
            out.pipeline = text
        elif name == "PROTEUS_CODEGEN_OPT_LEVEL":
            out.codegen_opt = integer(name, text, 0, 3)
        out.honoured.append(said)
    return out
