"""Loading progress on rank 0 (DDSTORE_PROGRESS): a tqdm bar on a
terminal, else a line on stderr every few seconds (batch jobs)."""

import sys
import time

from . import env

class _LogProgress:
    """Loading progress for batch jobs (stderr not a terminal): a line every
    `interval` seconds with percent, rate and ETA, and one when done."""

    def __init__(self, total, name, interval=5.0, out=None, unit="sample"):
        self.total, self.name, self.interval, self.unit = total, name, interval, unit
        self.out = out if out is not None else sys.stderr
        self.n = 0
        self.t0 = self._last = time.monotonic()

    def _line(self, done=False):
        el = max(time.monotonic() - self.t0, 1e-9)
        rate = self.n / el
        if self.unit == "B":     # bytes (loading from files): MB and MB/s
            n, tot, r, u = self.n / 1e6, self.total / 1e6, rate / 1e6, "MB"
        else:
            n, tot, r, u = self.n, self.total, rate, "samples"
        if done:
            msg = f"loaded {n:.0f} {u} in {el:.1f} s ({r:.0f} {u}/s)"
        else:
            eta = (self.total - self.n) / rate if rate > 0 else float("inf")
            msg = (f"{100.0 * self.n / self.total:.0f}% ({n:.0f}/{tot:.0f} {u}, "
                   f"{r:.0f} {u}/s, ETA {eta:.0f} s)")
        try:
            self.out.write(f"ddstore: loading '{self.name}' on rank 0: {msg}\n")
            self.out.flush()
        except (OSError, ValueError):
            pass

    def update(self, k):
        self.n = min(self.total, self.n + k)
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            self._line()

    def refresh(self):
        pass

    def close(self):
        if self.n >= self.total:
            self._line(done=True)


def progress(total, name, rank, unit="sample"):
    """Rank 0's loading progress (DDSTORE_PROGRESS, on by default): a tqdm bar
    on a terminal, else a line on stderr every few seconds.  unit: "sample",
    or "B" (bytes: rate and ETA in MB)."""
    if not (rank == 0 and total > 0 and env.progress()):
        return None
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        try:
            from tqdm import tqdm
        except ImportError:  # pragma: no cover - a declared dependency of [torch]
            tty = False
        else:
            return tqdm(total=total, desc=f"ddstore {name}", unit=unit, leave=False,
                        dynamic_ncols=True, mininterval=0.5, unit_scale=unit == "B")
    return _LogProgress(total, name, unit=unit)
