"""Running an app under the hook layer: what `kir trace` and `kir record` share
(the running itself is kir.app's)."""
from __future__ import annotations

import argparse
import sys

import kir
from kir.app import hook_library, hooked_environment, library, run_app  # noqa: F401 (the commands' API)
from kir.errors import OptionError
from kir.model import ContainerFormat


def add_program_argument(parser) -> None:
    """The app and its arguments: everything from the first word that is not one of
    kir's options (or after `--`) is the app's, never parsed by kir (`kir trace ./app
    --json` gives --json to the app)."""
    parser.add_argument("program", nargs=argparse.REMAINDER, metavar="[--] APP ARGS",
                        help="the program to run and its arguments (kir reads no option after APP)")


def add_kernel_argument(parser, help: str) -> None:
    """--kernel REGEX, as every verb spells it (`--kernels REGEX`, the earlier spelling
    of trace and record, stays a hidden alias)."""
    parser.add_argument("--kernel", metavar="REGEX", help=help)
    parser.add_argument("--kernels", dest="kernel", metavar="REGEX", help=argparse.SUPPRESS)


def command_of(program: list[str], usage: str) -> list[str]:
    """The app's command line: what follows `--` (or kir's options)."""
    command = program[1:] if program and program[0] == "--" else program
    if not command:
        raise OptionError(f"no program to run: {usage}")
    return command


def warn_if_static_runtime(program: str) -> None:
    """An app linking libcudart_static calls no runtime function the hook could
    interpose by name. On x86-64 the hook meets such a runtime at the driver
    (libkir/hook/dlsym.cpp: its dlsym of cuGetProcAddress); elsewhere it cannot."""
    import platform
    if platform.machine() in ("x86_64", "AMD64"):
        return
    from shutil import which
    path = which(program) or program
    try:
        binary = kir.open(path)
        imports = {s[0] for s in kir._core.ElfFile.open(path).symbols(True)}
    except (kir.KirError, OSError):
        return
    cuda = any(c.format is ContainerFormat.cuda_fatbin for c in binary.containers)
    if cuda and "__cudaRegisterFatBinary" not in imports:
        print(f"kir: {program} links the CUDA runtime statically: on {platform.machine()} the hook "
              "cannot see it (rebuild with `nvcc -cudart shared`)", file=sys.stderr)


__all__ = ["add_kernel_argument", "add_program_argument", "command_of", "warn_if_static_runtime"]
