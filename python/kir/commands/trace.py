"""`kir trace -- APP ARGS...`: run an app under the hook layer with the built-in
tracing client; print every registration (register-fatbin, -kernel, -global),
every unregistration (unregister-fatbin: a fatbin unregistered as its library
is unloaded or the app exits, or a module unloaded, with the number of
kernels registered with it), every allocation and free (kind: kir's allocation kind
names), and every launch (kernel, grid, block, shared memory, stream, argument
values — as their types say where the kernel's demangled name gives its
signature: 2.5, 1024, pointers in hex —, static and dynamic kir hashes, the
runtime's return code). The app's stdout, stderr and exit status pass through;
the trace goes to kir's stdout, or with -o FILE to that file (not mixed with
the app's output). Everything from the app's path on (or after `--`) is the
app's command line: `kir trace ./app --json` gives --json to the app.
KIR_HOOK_LOG=1 in the environment adds the layer's failure lines to stderr
(kir/hooks.h, "Errors")."""
from __future__ import annotations

import os
import select
import sys
import threading

from kir.app import finish, gpu_driver_problem, run_app_process, uses_gpu
from kir.commands.app import (
    add_kernel_argument,
    add_program_argument,
    command_of,
    hook_library,
    hooked_environment,
    warn_if_static_runtime,
)
from kir.kernel_pattern import HELP as KERNEL_HELP, kernel_pattern

__all__ = ["add_arguments", "run", "hook_library", "warn_if_static_runtime"]


def add_arguments(parser) -> None:
    # no --pretty (kir.envelope.add_json_argument): the events stream, one object per line
    parser.add_argument("--jsonl", "--json", dest="json", action="store_true",
                        help="JSON Lines: one object per event, written as it happens (schema kir.trace/1)")
    parser.add_argument("-o", "--output", metavar="FILE",
                        help="write the trace to FILE (replaced) instead of kir's stdout, apart from "
                             "the app's own output")
    add_kernel_argument(parser, f"only registrations and launches of kernels whose {KERNEL_HELP} (the hook's "
                                "tracing client filters in the app)")
    add_program_argument(parser)


def run(args) -> int:
    command = command_of(args.program, "kir trace [OPTIONS] [--] APP ARGS...")
    warn_if_static_runtime(command[0])
    env = hooked_environment()
    if args.kernel:
        kernel_pattern(args.kernel)  # refused here, before the app runs, as the tracing client would
        env["KIR_TRACE_KERNELS"] = args.kernel
    env["KIR_TRACE"] = "json" if args.json else "text"
    if args.output:
        return launched_or_no_driver(trace_to_file(command, env, args.output), args.output, command)
    read_fd, write_fd = os.pipe()
    pipe = os.fstat(write_fd)
    # The client writes only to this pipe (not to whatever file holds the number later) and
    # moves it to a close-on-exec descriptor: programs the app starts do not hold it open.
    env["KIR_TRACE_FD"] = f"{write_fd}:{pipe.st_dev}:{pipe.st_ino}"
    app_done = threading.Event()
    reader = threading.Thread(target=copy_lines, args=(read_fd, app_done), daemon=True)
    reader.start()
    try:
        app = run_app_process(command, env, pass_fds=(write_fd,))
    finally:
        app_done.set()  # the app's exit ends the trace, not the pipe's end: a child may keep it open
        reader.join()
    return launched_or_no_driver(finish(app), None, command)


def is_launch(line: str) -> bool:
    """A launch's trace line (text or JSON; libkir/hook/trace_client.cpp)."""
    return line.startswith(("kir-trace launch ", '{"event":"launch"'))


def launched_or_no_driver(status: int, path: str | None, command: list[str]) -> int:
    """The app's exit status, unless a GPU app (kir.app.uses_gpu) launched nothing on a
    machine without a usable GPU driver: then that is said, and the status is non-zero
    (issue 26: a trace of a machine without a driver said nothing and exited 0)."""
    if path is not None:
        with open(path, errors="replace") as f:
            launched = any(is_launch(line) for line in f)
    else:
        launched = launches > 0
    if launched or not uses_gpu(command) or not (problem := gpu_driver_problem()):
        return status
    print(f"kir: error: no launch was traced: no usable GPU driver on this machine ({problem}); "
          "registrations are traced without one", file=sys.stderr)
    return status or 1


def trace_to_file(command: list[str], env: dict[str, str], path: str) -> int:
    """Run the app with the client writing straight to `path` (appending, so that
    processes the app forks add whole lines)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC, 0o644)
    st = os.fstat(fd)
    env["KIR_TRACE_FD"] = f"{fd}:{st.st_dev}:{st.st_ino}"
    return finish(run_app_process(command, env, pass_fds=(fd,)))  # closes fd once the app has it


def copy_lines(fd: int, app_done: threading.Event) -> None:
    """Copy the trace lines from `fd` to stdout until the pipe ends, or the app has
    exited and nothing more is waiting in the pipe."""
    pending = b""
    try:
        while True:
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                if app_done.is_set():
                    break
                continue
            data = os.read(fd, 1 << 16)
            if not data:
                break
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                emit(line.decode(errors="replace") + "\n")
        if pending:
            emit(pending.decode(errors="replace") + "\n")
    finally:
        os.close(fd)


closed = False  # stdout's reader left (`kir trace ... | head`): read on, write nothing
launches = 0  # launch lines copied


def emit(line: str) -> None:
    """Write a trace line to stdout; once its reader has left, drop the lines (the
    pipe from the app is still drained, so the app never blocks on it)."""
    global closed, launches
    launches += is_launch(line)
    if closed:
        return
    try:
        sys.stdout.write(line)
        sys.stdout.flush()
    except BrokenPipeError:
        closed = True
        from kir.cli import silence_stdout
        silence_stdout()
