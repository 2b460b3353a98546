"""Kernel-name patterns: `--kernel REGEX` of every command (trace, record, inspect,
hash, diff, jit compile). One dialect, the regular expressions on which Python's re,
POSIX ERE and RE2 agree (docs/architecture.md, "Kernel-name patterns"; anything else is
refused, naming the construct and its offset); one engine, libkir's own
(`kir._core.KernelPattern`: a Thompson NFA simulated without backtracking or recursion),
the very code the hook's tracing client and the recorder run inside the app
(KIR_TRACE_KERNELS, KIR_RECORD_KERNELS); one rule: a pattern selects a kernel when it
matches anywhere in the kernel's mangled name or in its demangled name
(libkir/include/kir/support/kernel_pattern.hpp)."""
from __future__ import annotations

from kir import _core
from kir.errors import KirError, OptionError

#: The rule and the dialect, as the commands' --help says them.
HELP = ("mangled or demangled name contains a match of REGEX (kir's dialect: what Python's re, POSIX ERE "
        "and RE2 agree on; the same in every command)")


def kernel_pattern(text: str, option: str = "--kernel") -> _core.KernelPattern:
    """`text` compiled, or an OptionError naming `option`, the pattern and what kir refuses in it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:  # bytes that are not UTF-8 on the command line
        raise OptionError(f"{option} {text!r}: not valid UTF-8 at character {error.start}") from None
    try:
        return _core.KernelPattern(text)
    except KirError as error:
        raise OptionError(f"{option} {text!r}: {error}") from None


__all__ = ["HELP", "kernel_pattern"]
