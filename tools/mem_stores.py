"""Private memory per method-1 store per rank: K stores with tiny data in
one process.

    tools/ddrun -n 2 -- env DDSTORE_FABRIC=tcp .venv/bin/python tools/mem_stores.py 3

Prints one JSON line per rank: Rss and Private (Private_Clean +
Private_Dirty of /proc/self/smaps_rollup) in KiB before any store, after
each store's open and after a read from every rank of every store, and
the per-store increments.  Memory does not depend on the data size (rows
are 8 floats) nor on the load: the figures hold on a busy machine.
"""
import json
import os
import sys

import numpy as np

import pyddstore


def mem():
    out = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("Rss", "Private_Clean", "Private_Dirty"):
                out[k] = int(v.split()[0])
    return {"rss_kib": out["Rss"], "private_kib": out["Private_Clean"] + out["Private_Dirty"]}


def main():
    k = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    method = int(os.environ.get("DDSTORE_METHOD", "1"))
    stores = []
    before = mem()
    opened = []
    for i in range(k):
        s = pyddstore.PyDDStore(None, method=method)
        rows = np.full((4, 8), s.rank * 10 + i, dtype=np.float32)
        s.add("v", rows)
        stores.append(s)
        opened.append(mem())
    for i, s in enumerate(stores):
        out = np.zeros((1, 8), dtype=np.float32)
        for r in range(s.size):
            s.get("v", out, 4 * r)
            assert out[0, 0] == r * 10 + i, (i, r, out)
    read = mem()
    rank = stores[0].rank
    info = {}
    try:
        info = pyddstore.info()
    except Exception:  # noqa: BLE001
        pass
    for s in stores:
        s.free()
    print(json.dumps({
        "rank": rank, "stores": k, "method": method,
        "fabric": os.environ.get("DDSTORE_FABRIC", "auto"),
        "before": before, "opened": opened, "read": read,
        "private_per_store_mib": round((read["private_kib"] - before["private_kib"]) / 1024 / k, 1),
        "rss_per_store_mib": round((read["rss_kib"] - before["rss_kib"]) / 1024 / k, 1),
    }), flush=True)


if __name__ == "__main__":
    main()
