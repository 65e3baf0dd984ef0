"""Progress of a profiling run: events for a callback, and a console reporter for the CLI.

The library only calls the `progress` callback it is given (the service will pass its own). The
console reporter draws a bar on a terminal and writes plain lines otherwise (every 10% of a phase,
so a log file gets about ten lines per phase).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class ProgressEvent:
    phase: str  # "speed" (planner.profile.host_speed), "capture", "ops", "copies", "done"
    done: int
    total: int
    message: str = ""
    cache_hits: int = 0
    elapsed_seconds: float = 0.0

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(1.0, self.done / self.total)


ProgressCallback = Callable[[ProgressEvent], None]


class ConsoleProgress:
    """A ProgressCallback writing to `stream` (stderr): a bar on a TTY, log lines otherwise."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None, width: int = 30,
                 min_interval_s: float = 0.1):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.width = width
        self.min_interval_s = min_interval_s
        self._last_draw = 0.0
        self._last_decile: dict[str, int] = {}
        self._bar_open = False

    def __call__(self, event: ProgressEvent) -> None:
        if self.tty:
            self._draw(event)
        else:
            self._log(event)

    def _draw(self, event: ProgressEvent) -> None:
        now = time.monotonic()
        final = event.done >= event.total or event.phase == "done"
        if not final and now - self._last_draw < self.min_interval_s:
            return
        self._last_draw = now
        if event.phase == "done":
            if self._bar_open:
                self.stream.write("\n")
                self._bar_open = False
            self.stream.write(f"profile: {event.message}\n")
            self.stream.flush()
            return
        filled = int(self.width * event.fraction)
        bar = "#" * filled + "-" * (self.width - filled)
        text = (f"\r{event.phase:>7} [{bar}] {100 * event.fraction:3.0f}% "
                f"{event.done}/{event.total} {event.elapsed_seconds:6.1f}s "
                f"{event.message[:40]:<40}")
        self.stream.write(text)
        self._bar_open = True
        if final:
            self.stream.write("\n")
            self._bar_open = False
        self.stream.flush()

    def _log(self, event: ProgressEvent) -> None:
        if event.phase == "done":
            self.stream.write(f"profile: {event.message}\n")
            self.stream.flush()
            return
        decile = int(10 * event.fraction)
        if decile <= self._last_decile.get(event.phase, -1):
            return
        self._last_decile[event.phase] = decile
        self.stream.write(
            f"profile: {event.phase} {event.done}/{event.total} ({100 * event.fraction:.0f}%), "
            f"{event.elapsed_seconds:.1f}s elapsed, {event.cache_hits} cache hits"
            + (f", {event.message}" if event.message else "") + "\n"
        )
        self.stream.flush()
