"""The jobs of the cross-node tests (test_nodes.py), run on simulated nodes
by tools/ddrun --nodes K (see docs/testing.md):

    tools/ddrun --nodes 2 -n 4 [--plain] -- python nodes_job.py store METHOD [--comm mpi|file DIR]
    tools/ddrun --nodes 2 -n 4 --plain -- python nodes_job.py m2 HANDSHAKE_DIR
    tools/ddrun --nodes 2 -n 4 [--plain] -- python nodes_job.py fault CASE DIR

store: every rank adds a shard of "v" (uint8 rows of 3,136 B, values from
the row index) and of a ragged "rg", reads every row of every owner (get,
get_batch in a shuffled order) and checks each byte.  Rank 0 prints the
bytes that crossed the nodes' links during the reads ($DDRUN_NODES_DIR/hub
ip -s link) and the profile as one "RESULT {json}" line; each rank prints
"RANK r HOST ok".  Method 1 maps same-node owners' shards
(DDSTORE_OFI_MAP_SHARDS, the default): with DDSTORE_LOG_LEVEL=debug the
driver checks from the "is mapped" lines that only same-node owners were.

m2: ranks on node0 are a method-2 core job over a FileComm (2 ranks),
ranks on node1 readers (plain processes joining from the handshake
directory); the readers check every value and print the link bytes.

fault: see test_nodes.py (cases loss, rate, down, kill).
"""
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np

DISP = 3136          # bytes of a row (a 56 x 56 uint8 image)
ROWS = [5, 3, 6, 4]  # rows of rank r: ROWS[r % 4]


def rank_size():
    for r, s in (("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("SLURM_PROCID", "SLURM_NTASKS")):
        if r in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def node_of(rank, size, nodes):
    """The node of a rank under ddrun's block placement."""
    r = 0
    for i in range(nodes):
        c = size // nodes + (1 if i < size % nodes else 0)
        if rank < r + c:
            return i
        r += c
    raise ValueError(rank)


def rows(n):
    counts = [ROWS[r % 4] for r in range(n)]
    return counts, [sum(counts[:r]) for r in range(n)], sum(counts)


def values(g):
    """Row g: DISP bytes that differ from every other row's."""
    g = np.asarray(g, np.int64).reshape(-1, 1)
    j = np.arange(DISP, dtype=np.int64).reshape(1, -1)
    return ((g * 131 + j * 7 + (g * j) % 13) % 251).astype(np.uint8)


def link_bytes():
    """Bytes sent + received on every node's link (the hub's ends), {node: n}."""
    d = os.environ.get("DDRUN_NODES_DIR")
    if not d:
        return {}
    out = subprocess.run([os.path.join(d, "hub"), "ip", "-s", "-j", "link"], check=True,
                         capture_output=True, text=True).stdout
    res = {}
    for link in json.loads(out):
        name = link.get("ifname", "")
        if name.startswith("n") and name[1:].isdigit():
            st = link["stats64"]
            res[int(name[1:])] = st["rx"]["bytes"] + st["tx"]["bytes"]
    return res


def comm_for(args, rank, size):
    import pyddstore
    if args and args[0] == "--comm" and args[1] == "file":
        return pyddstore.FileComm(args[2], rank=rank, size=size, ns="store", timeout=120)
    return None     # MPI_COMM_WORLD


def store_job(method, args):
    import pyddstore
    rank, size = rank_size()
    comm = comm_for(args, rank, size)
    barrier = comm.barrier if comm is not None else __import__("mpi4py.MPI").MPI.COMM_WORLD.Barrier
    counts, first, total = rows(size)
    s = pyddstore.PyDDStore(comm, method=method)
    lo, hi = first[rank], first[rank] + counts[rank]
    s.add("v", values(np.arange(lo, hi)))
    # ragged: sample g has g % 5 element rows of 4 int32, element k = g * 100 + k
    lens = np.array([g % 5 for g in range(lo, hi)], np.int64)
    elems = np.concatenate([np.arange(g * 100, g * 100 + (g % 5) * 4, dtype=np.int32)
                            for g in range(lo, hi)] or [np.zeros(0, np.int32)]).reshape(-1, 4)
    s.add_ragged("rg", elems, lens)
    barrier()
    before = link_bytes() if rank == 0 else {}
    barrier()
    s.reset_profile("v")
    rng = np.random.default_rng(rank)
    for _ in range(3):
        order = rng.permutation(total)
        got = np.zeros((total, DISP), np.uint8)
        s.get_batch("v", got, order)
        assert np.array_equal(got, values(order)), "rank %d: a wrong row" % rank
    for g in range(total):
        one = np.zeros((1, DISP), np.uint8)
        s.get("v", one, g)
        assert np.array_equal(one, values([g])), "rank %d: row %d wrong" % (rank, g)
    idx = rng.permutation(total)
    vals, lens = s.get_ragged("rg", idx)
    want = [np.arange(g * 100, g * 100 + (g % 5) * 4, dtype=np.int32).reshape(-1, 4) for g in idx]
    assert list(lens) == [len(w) for w in want], "rank %d: ragged lengths wrong" % rank
    assert np.array_equal(vals, np.concatenate(want)), "rank %d: a ragged sample wrong" % rank
    prof = s.get_profile("v")
    barrier()
    after = link_bytes() if rank == 0 else {}
    remote_rows = sum(counts[r] for r in range(size)
                      if node_of(r, size, int(os.environ.get("DDRUN_NODES", "1")))
                      != node_of(rank, size, int(os.environ.get("DDRUN_NODES", "1"))))
    print("RANK %d %s ok remote_rows %d bytes %d local_bytes %d" % (
        rank, socket.gethostname(), remote_rows, prof["bytes"], prof["local_bytes"]), flush=True)
    if rank == 0:
        print("RESULT " + json.dumps({"link": {k: after[k] - before.get(k, 0) for k in after},
                                      "profile": prof, "size": size, "total": total}), flush=True)
    barrier()
    s.free()
    return 0


def m2_job(hs):
    import pyddstore
    rank, size = rank_size()
    nodes = int(os.environ["DDRUN_NODES"])
    node = node_of(rank, size, nodes)
    core = [r for r in range(size) if node_of(r, size, nodes) == 0]
    counts, first, total = rows(len(core))
    ready = os.path.join(hs, "core-ready")
    stop = os.path.join(hs, "core-stop")
    if node == 0:
        fc = pyddstore.FileComm(hs + "-comm", rank=rank, size=len(core), ns="core", timeout=120)
        s = pyddstore.PyDDStore(fc, method=2, handshake_dir=hs)
        lo, hi = first[rank], first[rank] + counts[rank]
        s.add("v", values(np.arange(lo, hi)))
        fc.barrier()
        if rank == 0:
            open(ready, "w").close()
        t0 = time.monotonic()
        while not os.path.exists(stop) and time.monotonic() - t0 < 240:
            time.sleep(0.05)
        fc.barrier()
        s.free()
        print("RANK %d %s core ok" % (rank, socket.gethostname()), flush=True)
        return 0
    s = pyddstore.PyDDStore(None, method=2, handshake_dir=hs, n_core=len(core))
    s.join("v")
    t0 = time.monotonic()
    while not os.path.exists(ready):
        assert time.monotonic() - t0 < 120, "core job not ready"
        time.sleep(0.05)
    before = link_bytes()
    rng = np.random.default_rng(rank)
    for _ in range(3):
        order = rng.permutation(total)
        got = np.zeros((total, DISP), np.uint8)
        s.get_batch("v", got, order)
        assert np.array_equal(got, values(order)), "reader %d: a wrong row" % rank
    prof = s.get_profile("v")
    after = link_bytes()
    s.free()
    print("RANK %d %s reader ok" % (rank, socket.gethostname()), flush=True)
    print("RESULT " + json.dumps({"rank": rank, "link": {k: after[k] - before.get(k, 0) for k in after},
                                  "profile": prof, "total": total}), flush=True)
    # the last reader to finish stops the core job
    done = os.path.join(hs, "reader-done-%d" % rank)
    open(done, "w").close()
    readers = [r for r in range(size) if node_of(r, size, nodes) != 0]
    if all(os.path.exists(os.path.join(hs, "reader-done-%d" % r)) for r in readers):
        open(stop, "w").close()
    return 0


def main(argv):
    if argv[0] == "store":
        return store_job(int(argv[1]), argv[2:])
    if argv[0] == "m2":
        return m2_job(argv[1])
    raise SystemExit("nodes_job.py: unknown job %r" % argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
