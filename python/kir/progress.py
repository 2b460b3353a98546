"""Progress of the long commands (`kir inspect --kernels`, `kir hash`, `kir extract`,
`kir diff`, `kir replay --all`, `kir tune`, `kir import-mneme`), as curl and pip show
theirs: one line on stderr, redrawn in place with a carriage return and erased when
the work ends, so nothing of it stays on the screen or mixes with the output.

It is shown only when stderr is a terminal: never when stderr is piped or
redirected to a file, never on stdout (where tables and JSON go), and not at all
with `--no-progress` (every long verb takes it) or the environment variable
`KIR_PROGRESS=0`.

    with Progress("decoding images") as progress:
        binary.load_code(images, threads, progress)   # progress(done, total)
    with Progress("hashing", total=len(files)) as progress:
        for path in files:
            progress.advance(item=path)

A Progress is also the `progress(done, total)` callback the core's parallel
decoder (`Binary.load_code`) takes."""
from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress", "add_argument", "disable", "enabled"]

#: KIR_PROGRESS values that turn progress off.
OFF = ("0", "no", "off", "false", "never")

_disabled = False


def disable() -> None:
    """No progress in this process from now on (`--no-progress`)."""
    global _disabled
    _disabled = True


def enabled(stream: TextIO | None = None) -> bool:
    """Whether progress is shown on `stream` (default stderr): it is a terminal,
    and neither --no-progress nor KIR_PROGRESS=0 turned progress off."""
    if _disabled or os.environ.get("KIR_PROGRESS", "").strip().lower() in OFF:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def add_argument(parser) -> None:
    """A long verb's `--no-progress` (kir.cli.main calls disable() when given)."""
    parser.add_argument("--no-progress", action="store_true",
                        help="show no progress line on stderr (shown only on a terminal; "
                             "also KIR_PROGRESS=0)")


class Progress:
    """One progress line: `kir: LABEL DONE/TOTAL ITEM`. Inactive (every call does
    nothing) when `enabled()` is false when it is made."""

    #: Seconds between redraws (the first and the last state are always drawn).
    interval = 0.1

    def __init__(self, label: str, total: int | None = None, stream: TextIO | None = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.active = enabled(self.stream)
        self.label = label
        self.total = total
        self.done = 0
        self._drawn = False  # a line is on the screen
        self._last = -1e9  # so the first state is drawn
        self._lock = threading.Lock()  # the core's decoder may call from its threads

    @property
    def callback(self) -> "Progress | None":
        """This line as the core's progress callback, or None when inactive (the core
        then makes no call at all)."""
        return self if self.active else None

    @property
    def label(self) -> str:
        return self._label

    @label.setter
    def label(self, text: str) -> None:
        """A new label (the next file, the next phase): its first state is drawn
        whatever the time since the last redraw."""
        self._label = text
        self._last = -1e9

    def __call__(self, done: int, total: int | None = None) -> None:
        """The core's callback form: `done` of `total` finished."""
        self.update(done, total)

    def update(self, done: int, total: int | None = None, item: str = "") -> None:
        """`done` of `total` (default: the total given before) finished; `item` names
        the one under way (a file, a record)."""
        if not self.active:
            return
        with self._lock:
            self.done = done
            if total is not None:
                self.total = total
            now = time.monotonic()
            final = self.total is not None and done >= self.total
            if not final and now - self._last < self.interval:
                return  # the first state is drawn (_last starts long ago), then at most one per interval
            self._last = now
            self._draw(item)

    def advance(self, count: int = 1, item: str = "") -> None:
        """`count` more finished."""
        self.update(self.done + count, None, item)

    def _draw(self, item: str) -> None:
        counts = f"{self.done}/{self.total}" if self.total is not None else f"{self.done}"
        line = f"kir: {self.label} {counts}" + (f" {item}" if item else "")
        width = shutil.get_terminal_size((80, 24)).columns - 1  # never wrap: \r returns to this line only
        if len(line) > width:
            line = line[:max(width - 3, 0)] + "..."
        try:
            self.stream.write(f"\r{line}\x1b[K")
            self.stream.flush()
            self._drawn = True
        except (OSError, ValueError):  # the terminal went away: stop showing
            self.active = False

    def clear(self) -> None:
        """Erase the line (before printing on the same terminal, and at the end)."""
        if not self.active or not self._drawn:
            return
        with self._lock:
            try:
                self.stream.write("\r\x1b[K")
                self.stream.flush()
            except (OSError, ValueError):
                self.active = False
            self._drawn = False

    close = clear

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
