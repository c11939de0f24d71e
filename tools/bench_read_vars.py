#!/usr/bin/env python3
"""A batch of fixed and ragged fields: one planned read against the calls per
field (issue 22, core's dds_store_read_vars).

    .venv/bin/python tools/bench_read_vars.py [--batches 200] [--nodes]
        [--delay 1ms] [--json out/bench_read_vars.json]

2 ranks; rank 1 holds every sample, rank 0 reads batches of 128 random samples
of 2 fixed fields (a: 32 float32, b: 8 int64) and 1 ragged field (r: 5..50
element rows of 16 float32).  Interleaved in one loop, the same indices:

  per field   ext.read_fields(a, b) (one planned call, one transport round)
              + ext.ragged_collate(r) with a generous size (one call, two
              rounds: index, payload): three rounds, what a batch cost
              before dds_store_read_vars;
  one call    ext.Reads(a, b, r).read: one dds_store_read_vars, two rounds
              (every ragged index; then every field's rows).

Both results are compared byte for byte.  Methods 0 and 1 on this node with
same-node mapping off (DDSTORE_MPI_SHM=0, DDSTORE_OFI_MAP_SHARDS=0: every
row through the transport) and, with --nodes, on two simulated nodes
(tools/ddrun --nodes 2, relays delaying every connection by --delay one way;
method 1 over a FileComm, method 0 under mpirun).  Figures: median ms per
batch.  A program, not a test; figures from a loaded machine are not
publishable (each line carries the 1-minute load average).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDRUN = os.path.join(TOP, "tools", "ddrun")
N, BATCH, FEAT = 4096, 128, 16


def _store(method, d):
    import pyddstore
    if "SLURM_PROCID" in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
        fc = pyddstore.FileComm(os.path.join(d, "fc"), rank=rank, size=size, ns="rv",
                                timeout=300)
        return pyddstore.PyDDStore(fc, method=method), fc.barrier
    from mpi4py import MPI
    return pyddstore.PyDDStore(None, method=method), MPI.COMM_WORLD.Barrier


def job(method, batches, d):
    import numpy as np
    import torch
    from pyddstore.torch._ext import ext
    s, barrier = _store(method, d)
    rank = s.rank
    mine = N if rank == 1 else 0
    lens = np.random.default_rng(3).integers(5, 51, N).astype(np.int64)
    s.add("a", np.arange(mine * 32, dtype=np.float32).reshape(mine, 32))
    s.add("b", np.arange(mine * 8, dtype=np.int64).reshape(mine, 8))
    my = lens if rank == 1 else lens[:0]
    s.add_ragged("r", np.arange(int(my.sum()) * FEAT, dtype=np.float32).reshape(-1, FEAT), my)
    barrier()
    res = {}
    if rank == 0:
        fields = [("a", "a", "a", [32], "float32", True, False, None),
                  ("b", "b", "b", [8], "int64", True, False, None),
                  ("r", "r", "r", [FEAT], "float32", True, True, None)]
        reads = ext.Reads(fields, N, "bench", None)
        rng = np.random.default_rng(11)
        ta, tb = torch.empty(BATCH, 32), torch.empty(BATCH, 8, dtype=torch.int64)
        t_old, t_new, bad = [], [], 0
        for it in range(batches + 5):
            idx = torch.from_numpy(rng.integers(0, N, BATCH).astype(np.int64))
            t0 = time.perf_counter()
            ext.read_fields(s, ["a", "b"], [ta, tb], idx)
            old_r = ext.ragged_collate(s, "r", [FEAT], "float32", idx, 60 * BATCH)
            t1 = time.perf_counter()
            new = reads.read(s, idx, None, None, None, 0, False, None)
            t2 = time.perf_counter()
            if it >= 5:
                t_old.append(t1 - t0)
                t_new.append(t2 - t1)
            if not (torch.equal(ta, new[0]) and torch.equal(tb, new[1]) and
                    all(torch.equal(x, y) for x, y in zip(old_r, new[2]))):
                bad += 1
        t_old.sort()
        t_new.sort()
        res = {"method": method, "per_field_ms": 1e3 * t_old[len(t_old) // 2],
               "one_call_ms": 1e3 * t_new[len(t_new) // 2], "batches": batches,
               "mismatches": bad, "load1": os.getloadavg()[0]}
        print("BENCH " + json.dumps(res), flush=True)
    barrier()
    s.free()
    return 1 if res.get("mismatches") else 0


def run(args, method, where):
    env = dict(os.environ, DDSTORE_MPI_SHM="0", DDSTORE_OFI_MAP_SHARDS="0")
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        cmd = [DDRUN]
        if where == "nodes":
            cmd += ["--nodes", "2", "--delay", args.delay] + (["--plain"] if method == 1 else [])
        cmd += ["-n", "2", "--timeout", "600", "--", sys.executable, os.path.abspath(__file__),
                "job", str(method), str(args.batches), d]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("BENCH "):
            rec = json.loads(line[6:])
            rec["where"] = where if where != "nodes" else "2 nodes, delay " + args.delay
            return rec
    raise RuntimeError("method %d (%s): exit %d\n%s%s" % (method, where, p.returncode,
                                                          p.stdout[-3000:], p.stderr[-3000:]))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "job":
        return job(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--nodes", action="store_true", help="also across 2 simulated nodes")
    ap.add_argument("--delay", default="1ms")
    ap.add_argument("--json")
    args = ap.parse_args()
    recs = []
    for where in ["local"] + (["nodes"] if args.nodes else []):
        for method in (0, 1):
            rec = run(args, method, where)
            recs.append(rec)
            print("method %d %-22s per field %8.3f ms  one call %8.3f ms  (load %.1f%s)" % (
                method, rec["where"], rec["per_field_ms"], rec["one_call_ms"], rec["load1"],
                ", MISMATCH" if rec["mismatches"] else ""), flush=True)
    if args.json:
        with open(args.json, "a") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
    return 1 if any(r["mismatches"] for r in recs) else 0


if __name__ == "__main__":
    sys.exit(main())
