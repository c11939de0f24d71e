#!/usr/bin/env python3
"""Draw a ThreadDataLoader epoch report as a PNG timeline.

    tools/loader_report_plot.py epochs.jsonl timeline.png [--epoch E]

epochs.jsonl: the JSON lines of ThreadDataLoader(report="epochs.jsonl") or
DDSTORE_LOADER_REPORT=epochs.jsonl.  Draws the last epoch's (or --epoch E's)
kept batches, waiting vs compute on the consumer's row and each fetch (read,
then collate + pin) on its worker's row, and every epoch's start / wait /
compute split.  Needs matplotlib; without it says so and exits with 1.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

from pyddstore.torch.report import plot_timeline  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("jsonl", help="the report's JSON lines")
    ap.add_argument("png", help="the PNG to write")
    ap.add_argument("--epoch", type=int, default=None, help="the epoch to draw (default last)")
    a = ap.parse_args(argv)
    if plot_timeline(a.jsonl, a.png, epoch=a.epoch) is None:
        print("loader_report_plot: matplotlib is not installed (pip install matplotlib); "
              "no plot written", file=sys.stderr)
        return 1
    print(f"wrote {a.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
