"""`kir trace -- APP ARGS...`: run an app under the hook layer with the built-in
tracing client; print every registration and every launch (kernel, grid, block,
shared memory, stream, argument values, static and dynamic kir hashes, the
runtime's return code). The app's stdout, stderr and exit status pass through."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import kir


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--kernels", metavar="REGEX",
                        help="only kernels whose mangled or demangled name matches")
    parser.add_argument("program", nargs="+", metavar="-- APP ARGS", help="the program to run")


def hook_library() -> Path:
    path = Path(kir.__file__).parent / "lib" / "libkir_hook.so"
    if not path.exists():
        raise OSError(f"the hook library is missing from this installation: {path}")
    return path


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


def run(args) -> int:
    command = args.program[1:] if args.program[0] == "--" else args.program
    if not command:
        raise ValueError("no program to run: kir trace -- APP ARGS...")
    warn_if_static_runtime(command[0])
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(hook_library()), env.get("LD_PRELOAD", "")]))
    env["KIR_TRACE"] = "json" if args.json else "text"
    env["KIR_TRACE_FD"] = str(write_fd)
    pattern = re.compile(args.kernels) if args.kernels else None
    reader = threading.Thread(target=copy_lines, args=(read_fd, pattern), daemon=True)
    reader.start()
    try:
        proc = subprocess.Popen(command, env=env, pass_fds=(write_fd,))
    except OSError as error:
        os.close(write_fd)
        raise OSError(f"cannot run {command[0]}: {error.strerror}") from None
    os.close(write_fd)
    status = proc.wait()
    reader.join()
    return status if status >= 0 else 128 - status


def copy_lines(fd: int, pattern) -> None:
    with os.fdopen(fd, "r", errors="replace") as lines:
        for line in lines:
            if pattern is None or not is_kernel_line(line) or pattern.search(line):
                sys.stdout.write(line)
                sys.stdout.flush()


def is_kernel_line(line: str) -> bool:
    return "launch" in line[:40] or "register-kernel" in line[:40]
