"""Loading progress on rank 0 (DDSTORE_PROGRESS): a tqdm bar on a
terminal, else a line on stderr every few seconds (batch jobs)."""

import sys
import time

from . import env

class _LogProgress:
    """Loading progress for batch jobs (stderr not a terminal): a line every
    `interval` seconds with percent, rate and ETA, and one when done."""

    def __init__(self, total, name, interval=5.0, out=None):
        self.total, self.name, self.interval = total, name, interval
        self.out = out if out is not None else sys.stderr
        self.n = 0
        self.t0 = self._last = time.monotonic()

    def _line(self, done=False):
        el = max(time.monotonic() - self.t0, 1e-9)
        rate = self.n / el
        if done:
            msg = f"loaded {self.n} samples in {el:.1f} s ({rate:.0f} samples/s)"
        else:
            eta = (self.total - self.n) / rate if rate > 0 else float("inf")
            msg = (f"{100.0 * self.n / self.total:.0f}% ({self.n}/{self.total} samples, "
                   f"{rate:.0f} samples/s, ETA {eta:.0f} s)")
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


def progress(total, name, rank):
    """Rank 0's loading progress (DDSTORE_PROGRESS, on by default): a tqdm bar
    on a terminal, else a line on stderr every few seconds."""
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
            return tqdm(total=total, desc=f"ddstore {name}", unit="sample", leave=False,
                        dynamic_ncols=True, mininterval=0.5)
    return _LogProgress(total, name)
