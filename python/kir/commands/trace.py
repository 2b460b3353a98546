"""`kir trace -- APP ARGS...`: run an app under the hook layer with the built-in
tracing client; print every registration (register-fatbin, -kernel, -global),
every unregistration (unregister-fatbin: a fatbin unregistered as its library
is unloaded or the app exits, or a module unloaded, with the number of
kernels registered with it), every allocation and free (kind: kir's allocation kind
names), and every launch (kernel, grid, block, shared memory, stream, argument
values, static and dynamic kir hashes, the runtime's return code). The app's
stdout, stderr and exit status pass through; KIR_HOOK_LOG=1 in the environment
adds the layer's failure lines to stderr (kir/hooks.h, "Errors")."""
from __future__ import annotations

import os
import select
import sys
import threading

from kir.recorder import check_kernel_regex
from kir.commands.app import command_of, hook_library, hooked_environment, run_app, warn_if_static_runtime

__all__ = ["add_arguments", "run", "hook_library", "warn_if_static_runtime"]


def add_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--kernels", metavar="REGEX",
                        help="only kernel registrations and launches whose mangled or demangled name "
                             "matches (an ECMAScript regular expression, as std::regex reads it: the "
                             "hook's tracing client filters, with the recorder's dialect)")
    parser.add_argument("program", nargs="+", metavar="-- APP ARGS", help="the program to run")


def run(args) -> int:
    command = command_of(args.program, "kir trace -- APP ARGS...")
    warn_if_static_runtime(command[0])
    env = hooked_environment()
    if args.kernels:
        check_kernel_regex(args.kernels)  # the tracing client's own dialect, as the recorder's
        env["KIR_TRACE_KERNELS"] = args.kernels
    read_fd, write_fd = os.pipe()
    pipe = os.fstat(write_fd)
    env["KIR_TRACE"] = "json" if args.json else "text"
    # The client writes only to this pipe (not to whatever file holds the number later) and
    # moves it to a close-on-exec descriptor: programs the app starts do not hold it open.
    env["KIR_TRACE_FD"] = f"{write_fd}:{pipe.st_dev}:{pipe.st_ino}"
    app_done = threading.Event()
    reader = threading.Thread(target=copy_lines, args=(read_fd, app_done), daemon=True)
    reader.start()
    try:
        status = run_app(command, env, pass_fds=(write_fd,))
    finally:
        app_done.set()  # the app's exit ends the trace, not the pipe's end: a child may keep it open
        reader.join()
    return status


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


def emit(line: str) -> None:
    sys.stdout.write(line)
    sys.stdout.flush()
