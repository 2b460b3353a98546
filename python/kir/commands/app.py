"""Running an app under the hook layer: what `kir trace` and `kir record` share."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kir


def library(name: str) -> Path:
    """A library of this installation's `lib/` folder (libkir_hook.so, a client)."""
    path = Path(kir.__file__).parent / "lib" / name
    if not path.exists():
        raise OSError(f"{name} is missing from this installation: {path}")
    return path


def hook_library() -> Path:
    return library("libkir_hook.so")


def command_of(program: list[str], usage: str) -> list[str]:
    """The app's command line: what follows `--`."""
    command = program[1:] if program and program[0] == "--" else program
    if not command:
        raise ValueError(f"no program to run: {usage}")
    return command


def hooked_environment(clients: list[Path] = ()) -> dict[str, str]:
    """This environment with the hook preloaded (before any LD_PRELOAD already set)
    and the client libraries it should load."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(hook_library()), env.get("LD_PRELOAD", "")]))
    if clients:
        env["KIR_HOOK_CLIENTS"] = ":".join(str(c) for c in clients)
    return env


def run_app(command: list[str], env: dict[str, str], pass_fds=()) -> int:
    """Run the app to its end; its exit status (128 + N when killed by signal N)."""
    try:
        proc = subprocess.Popen(command, env=env, pass_fds=pass_fds)
    except OSError as error:
        raise OSError(f"cannot run {command[0]}: {error.strerror}") from None
    finally:
        for fd in pass_fds:
            os.close(fd)
    status = proc.wait()
    return status if status >= 0 else 128 - status


def warn_if_static_runtime(program: str) -> None:
    """An app linking libcudart_static calls no runtime the hook could interpose."""
    from shutil import which
    path = which(program) or program
    try:
        binary = kir.open(path)
        imports = {s[0] for s in kir._core.ElfFile.open(path).symbols(True)}
    except (kir.KirError, OSError):
        return
    cuda = any(c.format == "cuda-fatbin" for c in binary.containers)
    if cuda and "__cudaRegisterFatBinary" not in imports:
        print(f"kir: {program} links the CUDA runtime statically: the hook cannot see it "
              "(rebuild with `nvcc -cudart shared`)", file=sys.stderr)
