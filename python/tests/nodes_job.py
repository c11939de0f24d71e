"""The jobs of the cross-node tests (test_nodes.py), run on simulated nodes
by tools/ddrun --nodes K (see docs/testing.md):

    tools/ddrun --nodes 2 -n 4 [--plain] -- python nodes_job.py store METHOD [--comm mpi|file DIR]
    tools/ddrun --nodes 2 -n 4 --plain -- python nodes_job.py m2 HANDSHAKE_DIR
    tools/ddrun --nodes 2 -n 4 [--plain] -- python nodes_job.py fault CASE DIR
    tools/ddrun --nodes 2 -n 2 --delay 0 [--plain] -- python nodes_job.py bench DIR [METHOD]
    tools/ddrun --nodes 3 -n 3 --delay 0 [--plain] -- python nodes_job.py owners DIR [METHOD]
    tools/ddrun --nodes 3 -n 3 --delay 0 -- python nodes_job.py flush

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
import re
import socket
import subprocess
import sys
import time

import numpy as np

DISP = 3136          # bytes of a row (a 56 x 56 uint8 image)
ROWS = [5, 3, 6, 4]  # rows of rank r: ROWS[r % 4]


def say(line):
    """One line on stdout in one write: the ranks share the pipe."""
    os.write(1, (line + "\n").encode())


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


def nodes_env():
    return int(os.environ.get("DDRUN_NODES", "1"))


def forked(fn):
    """Run fn() in a forked child; its exception's text, or "ok"."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fn()
            msg = "ok"
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            msg = repr(e)
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        msg = f.read()
    os.waitpid(pid, 0)
    return msg


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
        read_all(s, total, rng)
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
    if method == 0:
        # a forked process cannot use MPI: rows of another node's ranks are
        # a clear error there (same-node rows are read from shared memory)
        other = [r for r in range(size) if node_of(r, size, nodes_env()) != node_of(rank, size, nodes_env())]
        msg = forked(lambda: s.fork_reader().get("v", np.zeros((1, DISP), np.uint8), first[other[0]]))
        assert "not in shared memory on this node" in msg and "rank %d" % other[0] in msg, msg
    barrier()
    after = link_bytes() if rank == 0 else {}
    remote_rows = sum(counts[r] for r in range(size)
                      if node_of(r, size, int(os.environ.get("DDRUN_NODES", "1")))
                      != node_of(rank, size, int(os.environ.get("DDRUN_NODES", "1"))))
    say("RANK %d %s ok remote_rows %d bytes %d local_bytes %d" % (
        rank, socket.gethostname(), remote_rows, prof["bytes"], prof["local_bytes"]))
    if rank == 0:
        say("RESULT " + json.dumps({"link": {k: after[k] - before.get(k, 0) for k in after},
                                      "profile": prof, "size": size, "total": total}))
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
        say("RANK %d %s core ok" % (rank, socket.gethostname()))
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
        read_all(s, total, rng)
    prof = s.get_profile("v")
    after = link_bytes()
    s.free()
    say("RANK %d %s reader ok" % (rank, socket.gethostname()))
    say("RESULT " + json.dumps({"rank": rank, "link": {k: after[k] - before.get(k, 0) for k in after},
                                  "profile": prof, "total": total}))
    # the last reader to finish stops the core job
    done = os.path.join(hs, "reader-done-%d" % rank)
    open(done, "w").close()
    readers = [r for r in range(size) if node_of(r, size, nodes) != 0]
    if all(os.path.exists(os.path.join(hs, "reader-done-%d" % r)) for r in readers):
        open(stop, "w").close()
    return 0


def node_tool(tool, *args):
    d = os.environ["DDRUN_NODES_DIR"]
    return subprocess.run([os.path.join(d, tool)] + [str(a) for a in args], check=True,
                          capture_output=True, text=True).stdout


# faults on node1's link, made in node1's namespace (nftables, tc) or on the
# hub's end of it (ip link set n1 down/up); cleared by clear_faults()
FAULTS = {
    "loss1": [["nft", "add table inet ddfault"],
              ["nft", "add chain inet ddfault out { type filter hook output priority 0 ; }"],
              ["nft", "add chain inet ddfault in { type filter hook input priority 0 ; }"],
              ["nft", "add rule inet ddfault out oifname eth0 numgen random mod 100 < 1 counter drop"],
              ["nft", "add rule inet ddfault in iifname eth0 numgen random mod 100 < 1 counter drop"]],
    "rate": [["tc", "qdisc add dev eth0 root tbf rate 20mbit burst 32kb latency 50ms"]],
}
FAULTS["loss10"] = [[c, a.replace("< 1 counter", "< 10 counter")] for c, a in FAULTS["loss1"]]
# delay (ddrun --delay 0: every cross-node connection through a relay of the
# node that opened it; $DDRUN_NODES_DIR/delay sets its one-way delay)
DELAYS = {"delay-50us": "50us", "delay-1ms": "1ms", "delay-20ms": "20ms"}


def dropped():
    """Packets the loss rules dropped so far (0 without them)."""
    try:
        out = node_tool("on", 1, "nft", "list", "table", "inet", "ddfault")
    except subprocess.CalledProcessError:
        return 0
    return sum(int(n) for n in re.findall(r"counter packets (\d+)", out))


def apply_fault(case):
    if case in DELAYS:
        node_tool("delay", DELAYS[case])
        time.sleep(0.2)       # the relays poll the setting every 50 ms
        return
    for cmd, args in FAULTS[case]:
        node_tool("on", 1, cmd, *args.split())
    if case == "rate":   # the other direction: the hub's end towards node1
        node_tool("hub", "tc", "qdisc", "add", "dev", "n1", "root", "tbf", "rate", "20mbit",
                  "burst", "32kb", "latency", "50ms")


def clear_faults():
    d = os.environ["DDRUN_NODES_DIR"]
    for cmd in (["on", "1", "nft", "delete", "table", "inet", "ddfault"],
                ["on", "1", "tc", "qdisc", "del", "dev", "eth0", "root"],
                ["hub", "tc", "qdisc", "del", "dev", "n1", "root"],
                ["hub", "ip", "link", "set", "n1", "up"]) + ((["delay", "0"],) if os.path.exists(
                    os.path.join(d, "delay")) else ()):
        subprocess.run([os.path.join(d, cmd[0])] + cmd[1:], capture_output=True)


def read_all(s, total, rng):
    """One batch of every row in a shuffled order; checks every byte."""
    order = rng.permutation(total)
    got = np.zeros((total, DISP), np.uint8)
    s.get_batch("v", got, order)
    assert np.array_equal(got, values(order)), "a wrong row"


def try_read_all(s, total, rng, errs):
    """read_all; 1 if it returned, else 0 and its error (with the seconds it
    took) appended to errs."""
    import pyddstore
    t0 = time.monotonic()
    try:
        read_all(s, total, rng)
        return 1
    except pyddstore.DDStoreError as e:
        errs.append("%.1f s: %s" % (time.monotonic() - t0, e))
        return 0


def fault_job(case, d):
    """Method 1 over tcp on a FileComm (plain processes: the comm does not
    cross the links, the reads do) with a fault on node1's link."""
    import threading
    import pyddstore
    rank, size = rank_size()
    nodes = nodes_env()
    node = node_of(rank, size, nodes)
    fc = pyddstore.FileComm(os.path.join(d, "fc"), rank=rank, size=size, ns="fault", timeout=180)
    counts, first, total = rows(size)
    s = pyddstore.PyDDStore(fc, method=1)
    s.add("v", values(np.arange(first[rank], first[rank] + counts[rank])))
    rng = np.random.default_rng(rank)
    read_all(s, total, rng)           # every peer connected before the fault
    fc.barrier()
    if case == "kill":
        node1 = [r for r in range(size) if node_of(r, size, nodes) == 1]
        killed = os.path.join(d, "killed")
        if node == 1:
            time.sleep(300)           # until node 1 is killed
            return 1
        if rank == 0:
            say("KILLED %s" % node_tool("kill-node", 1).split())
            open(killed, "w").close()
        while not os.path.exists(killed):
            time.sleep(0.05)
        errs = []
        for o in node1:               # a row of each killed rank
            try:
                s.get("v", np.zeros((1, DISP), np.uint8), first[o])
                errs.append("rank %d: read returned" % o)
            except pyddstore.DDStoreError as e:
                errs.append(str(e))
        say("FAULT " + json.dumps({"rank": rank, "errors": errs, "node1": node1}))
        os._exit(0)                   # free() is collective: the killed ranks cannot join
    ok, errs, drops = 0, [], 0
    if case in FAULTS or case in DELAYS:
        if rank == 0:
            apply_fault(case)
        fc.barrier()
        for _ in range(4):
            read_all(s, total, rng)
            ok += 1
        # 1 % of a few hundred packets may be none: rank 0 reads on (every
        # row checked) until the rule has dropped one, so that the reads
        # above and these ran over a link that loses packets
        for _ in range(2000 if rank == 0 and case.startswith("loss") else 0):
            if dropped():
                break
            read_all(s, total, rng)
        fc.barrier()
        if rank == 0:
            drops = dropped()
            clear_faults()
            time.sleep(0.2)
    elif case == "delay-long":        # one-way delay 3 x DDSTORE_READ_TIMEOUT_S
        tmo = float(os.environ["DDSTORE_READ_TIMEOUT_S"])
        if rank == 0:
            node_tool("delay", "%gs" % (3 * tmo))
            time.sleep(0.2)
        fc.barrier()
        for _ in range(2):
            ok += try_read_all(s, total, rng, errs)
        fc.barrier()
        if rank == 0:
            clear_faults()
        # what the relays hold was sent with the long delay and arrives at
        # its time (as on a wire): the link is "back" once it has drained
        time.sleep(3 * tmo + 0.5)
        fc.barrier()
    else:                             # down-short, down-long: n1 down for a while, mid-epoch
        down_s = {"down-short": 1.0, "down-long": 3 * float(os.environ["DDSTORE_READ_TIMEOUT_S"])}[case]
        up = os.path.join(d, "up")

        def toggle():
            time.sleep(0.3)
            node_tool("hub", "ip", "link", "set", "n1", "down")
            time.sleep(down_s)
            node_tool("hub", "ip", "link", "set", "n1", "up")
            open(up, "w").close()
        th = None
        if rank == 0:
            th = threading.Thread(target=toggle)
            th.start()
        while not os.path.exists(up):
            ok += try_read_all(s, total, rng, errs)
        if th:
            th.join()
        fc.barrier()
    # the link is back: the store reads again
    read_all(s, total, rng)
    say("FAULT " + json.dumps({"rank": rank, "ok": ok, "errors": errs, "recovered": True,
                               "dropped": drops}))
    fc.barrier()
    s.free()
    return 0


# bench conditions: (one-way delay, tbf rate on node1's link both ways, tbf
# burst).  A token bucket refills while the link idles (a round trip per
# batch), so with a delay the burst is small: a 256 KB burst would hide up
# to 256 KB / rate of every round trip (bench_nodes.py models it).
BENCH_CONDS = [("0", None, None), ("50us", None, None), ("1ms", None, None),
               ("5ms", None, None), ("20ms", None, None),
               ("0", "1gbit", "256kb"), ("0", "200mbit", "256kb"), ("0", "50mbit", "256kb"),
               ("1ms", "200mbit", "16kb"), ("5ms", "200mbit", "16kb"), ("20ms", "50mbit", "16kb")]
FIELDS = 4           # the per-field case: 4 variables of DISP / 4 bytes per row


def bench_shapes(rank, owner):
    """name -> (variable, rows per batch, row bytes, indices read, fields):
    small: 128 rows of 3,136 B scattered over a 1,024-row shard (no two
    adjacent: 128 single-row reads); run: the same bytes as 128 adjacent
    rows (one read); big: 8 rows of 1 MiB (every other row of 16: 8 reads);
    fields: 128 scattered rows of 4 variables of 784 B, one get_batch per
    variable (4 x 128 reads: fields x owner-runs).  What packing a sample's
    fields into one row would read is `small` (the same bytes in one
    variable)."""
    rng = np.random.default_rng(7)
    scattered = np.sort(rng.choice(512, 128, replace=False)) * 2
    rng.shuffle(scattered)
    return {"small": ("small", 128, DISP, scattered, 1),
            "run": ("small", 128, DISP, np.arange(128), 1),
            "big": ("big", 8, 1 << 20, np.arange(0, 16, 2), 1),
            "fields": ("f", 128, DISP // FIELDS, scattered, FIELDS)}


def bench_store(d, method, rank, size):
    """The benchmarks' store and barrier: method 1 over a FileComm (plain
    processes), method 0 over MPI_COMM_WORLD (mpirun)."""
    import pyddstore
    if method == 1:
        fc = pyddstore.FileComm(os.path.join(d, "fc"), rank=rank, size=size, ns="bench", timeout=300)
        return pyddstore.PyDDStore(fc, method=1), fc.barrier
    return (pyddstore.PyDDStore(None, method=method),
            __import__("mpi4py.MPI").MPI.COMM_WORLD.Barrier)


def bench_job(d, method=1, conds=None):
    """2 ranks on 2 nodes (ddrun --nodes 2 -n 2 --delay 0; --plain for
    method 1 over a FileComm, mpirun for method 0): rank 0 times batches of
    rank 1's rows (bench_shapes) under each condition of BENCH_CONDS in
    turn (the relays' delay, tbf on node1's link); prints "BENCH {json}"
    (median ms per batch, "SHAPE@DELAY/RATE/BURST")."""
    rank, size = rank_size()
    s, barrier = bench_store(d, method, rank, size)
    s.add("small", np.full((1024 if rank == 1 else 0, DISP), 7, np.uint8))
    s.add("big", np.full((16 if rank == 1 else 0, 1 << 20), 7, np.uint8))
    for f in range(FIELDS):
        s.add("f%d" % f, np.full((1024 if rank == 1 else 0, DISP // FIELDS), 7, np.uint8))
    barrier()
    res = {}
    if rank == 0:
        shapes = bench_shapes(rank, 1)
        for delay, rate, burst in conds or BENCH_CONDS:
            clear_faults()
            node_tool("delay", delay)
            if rate:
                node_tool("on", 1, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                          "burst", burst, "latency", "400ms")
                node_tool("hub", "tc", "qdisc", "add", "dev", "n1", "root", "tbf", "rate", rate,
                          "burst", burst, "latency", "400ms")
            time.sleep(0.2)            # the relays poll the delay every 50 ms
            for name, (var, n, b, idx, nf) in shapes.items():
                got = [np.zeros((n, b), np.uint8) for _ in range(nf)]
                names = [var] if nf == 1 else ["%s%d" % (var, f) for f in range(nf)]
                for v, g in zip(names, got):
                    s.get_batch(v, g, idx)          # connected, warm
                ts = []
                for _ in range(5 if name == "big" else 15):
                    t0 = time.perf_counter()
                    for v, g in zip(names, got):
                        s.get_batch(v, g, idx)
                    ts.append(time.perf_counter() - t0)
                assert all((g == 7).all() for g in got)
                res["%s@%s/%s/%s" % (name, delay, rate or "none", burst or "-")] = \
                    1e3 * float(np.median(ts))
        clear_faults()
        say("BENCH " + json.dumps(res))
    barrier()
    s.free()
    return 0


def owners_job(d, method=1):
    """3 ranks on 3 nodes (ddrun --nodes 3 -n 3 --delay 0): rank 0 times
    batches of 128 scattered rows of 3,136 B from one remote owner (rank 1)
    and from two (ranks 1 and 2, 64 each, interleaved) at each delay:
    whether the owners' round trips overlap.  Prints "OWNERS {json}"."""
    rank, size = rank_size()
    s, barrier = bench_store(d, method, rank, size)
    s.add("small", np.full((1024 if rank else 0, DISP), 7, np.uint8))
    barrier()
    if rank == 0:
        rng = np.random.default_rng(3)
        a = np.sort(rng.choice(512, 128, replace=False)) * 2
        one = rng.permutation(a)
        two = rng.permutation(np.concatenate([a[:64], 1024 + a[64:]]))
        res = {}
        for delay in ("0", "5ms", "20ms"):
            node_tool("delay", delay)
            time.sleep(0.2)
            for name, idx in (("one", one), ("two", two)):
                got = np.zeros((128, DISP), np.uint8)
                s.get_batch("small", got, idx)
                ts = []
                for _ in range(15):
                    t0 = time.perf_counter()
                    s.get_batch("small", got, idx)
                    ts.append(time.perf_counter() - t0)
                assert (got == 7).all()
                res["%s@%s" % (name, delay)] = 1e3 * float(np.median(ts))
        node_tool("delay", "0")
        say("OWNERS " + json.dumps(res))
    barrier()
    s.free()
    return 0


def flush_job():
    """3 ranks on 3 nodes, mpirun, ddrun --delay 0: MPI alone (mpi4py, no
    ddstore): rank 0 gets 64 rows of 3,136 B from each of ranks 1 and 2 and
    completes them as ddstore-mpi does (MPI_Win_flush_local per owner, in
    turn) or with one MPI_Win_flush_local_all, at 0 and 20 ms one way.
    Prints "FLUSH {json}" (median ms)."""
    from mpi4py import MPI
    c = MPI.COMM_WORLD
    buf = np.full(1 << 20, c.Get_rank(), np.uint8)
    win = MPI.Win.Create(buf, 1, comm=c)
    win.Lock_all(MPI.MODE_NOCHECK)
    c.Barrier()
    if c.Get_rank() == 0:
        out = [np.zeros(64 * DISP, np.uint8) for _ in range(2)]
        res = {}
        for delay in ("0", "20ms"):
            node_tool("delay", delay)
            time.sleep(0.2)
            for mode in ("per-owner", "all"):
                ts = []
                for _ in range(8):
                    t0 = time.perf_counter()
                    for o in (1, 2):
                        for k in range(64):
                            win.Get([out[o - 1][k * DISP:(k + 1) * DISP], MPI.BYTE], o,
                                    target=(2 * k * DISP, DISP, MPI.BYTE))
                    if mode == "all":
                        win.Flush_local_all()
                    else:
                        win.Flush_local(1)
                        win.Flush_local(2)
                    ts.append(time.perf_counter() - t0)
                res["%s@%s" % (mode, delay)] = 1e3 * float(np.median(ts))
        node_tool("delay", "0")
        say("FLUSH " + json.dumps(res))
    c.Barrier()
    win.Unlock_all()
    win.Free()
    return 0


def pack_job(d, method=1):
    """2 ranks on 2 nodes (ddrun --nodes 2 -n 2 --delay 0 --plain): a
    DistDataset of samples of 4 fields of 784 B (3,136 B a sample), stored
    one variable per field and packed (pack_fields=True); rank 0 times
    batches of 128 scattered samples of rank 1 through the direct collate
    (what ThreadDataLoader runs) at each delay, and counts the planned and
    remote reads per batch from the datasets' profiles.  Prints
    "PACK {json}": "LAYOUT@DELAY" -> median ms per batch, and
    "LAYOUT:calls" / "LAYOUT:reads" per batch."""
    import pyddstore
    import torch
    from pyddstore.torch import DistDataset
    rank, size = rank_size()
    fc = pyddstore.FileComm(os.path.join(d, "fc"), rank=rank, size=size, ns="pack", timeout=300)
    n = 2048                                    # samples, 1,024 a rank

    class Src(torch.utils.data.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return {"f%d" % k: torch.full((784,), (i + k) % 251, dtype=torch.uint8)
                    for k in range(4)}
    ds = {lay: DistDataset(Src(), "pk_" + lay, fc, method=method, pack_fields=(lay == "packed"))
          for lay in ("fields", "packed")}
    fc.barrier()
    res = {}
    if rank == 0:
        rng = np.random.default_rng(5)
        idx = (1024 + np.sort(rng.choice(512, 128, replace=False)) * 2).tolist()
        rng.shuffle(idx)
        want = [torch.tensor([[(i + k) % 251] * 784 for i in idx], dtype=torch.uint8)
                for k in range(4)]
        for delay in ("0", "1ms", "20ms"):
            node_tool("delay", delay)
            time.sleep(0.2)
            for lay, x in ds.items():
                b = x._collate(idx)                 # connected, warm
                assert all(torch.equal(b["f%d" % k], want[k]) for k in range(4)), lay
                p0 = x.get_profile()
                ts = []
                for _ in range(15):
                    t0 = time.perf_counter()
                    x._collate(idx)
                    ts.append(time.perf_counter() - t0)
                p1 = x.get_profile()
                res["%s@%s" % (lay, delay)] = 1e3 * float(np.median(ts))
                if delay == "0":
                    res[lay + ":calls"] = (p1["calls"] - p0["calls"]) / 15
                    res[lay + ":reads"] = (p1["reads"] - p0["reads"]) / 15
        node_tool("delay", "0")
        say("PACK " + json.dumps(res))
    fc.barrier()
    for x in ds.values():
        x.free()
    return 0


def main(argv):
    if argv[0] == "store":
        return store_job(int(argv[1]), argv[2:])
    if argv[0] == "m2":
        return m2_job(argv[1])
    if argv[0] == "bench":
        return bench_job(argv[1], int(argv[2]) if len(argv) > 2 else 1)
    if argv[0] == "flush":
        return flush_job()
    if argv[0] == "owners":
        return owners_job(argv[1], int(argv[2]) if len(argv) > 2 else 1)
    if argv[0] == "pack":
        return pack_job(argv[1], int(argv[2]) if len(argv) > 2 else 1)
    if argv[0] == "fault":
        return fault_job(argv[1], argv[2])
    raise SystemExit("nodes_job.py: unknown job %r" % argv[0])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
