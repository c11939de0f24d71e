"""Across nodes: the store on simulated nodes (tools/ddrun --nodes, see
docs/testing.md), each node with its own hostname, network namespace and
/dev/shm, linked through a bridge of the run; faults on a node's link.

The jobs are python/tests/nodes_job.py.  These tests start their own runs
(tools/ddrun --nodes 2 -n 4) and need namespaces (root), so they run in
stage `nodes` of ci/run_tests.py (DDRUN_NODES_TESTS=1) and skip elsewhere,
and where `tools/ddrun --nodes-check` says namespaces cannot be made.
"""
import json
import os
import re
import subprocess
import sys

import pytest

import pyddstore
from _util import launch_size as _world_size

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
DDRUN = os.path.join(TOP, "tools", "ddrun")
JOB = os.path.join(HERE, "nodes_job.py")
sys.path.insert(0, HERE)
import nodes_job  # noqa: E402

_LAUNCH = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "SLURM_", "DDRUN_NODES")
_KEEP = {"OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}


def _why_not():
    if os.environ.get("DDRUN_NODES_TESTS") != "1":
        return "cross-node runs: stage `nodes` of ci/run_tests.py (DDRUN_NODES_TESTS=1)"
    if _world_size() != 1:
        return "they start their own runs: 1 process only"
    p = subprocess.run([DDRUN, "--nodes-check"], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return (p.stderr or p.stdout).strip()
    return None


_WHY = _why_not()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _env(extra=None):
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(_LAUNCH) and k not in _KEEP)}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(pyddstore.__file__)))
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DDRUN_PYTHON", sys.executable)     # ddrun --delay's relays
    env.update(extra or {})
    return env


def run_nodes(args, extra=None, plain=False, n=4, nodes=2, timeout=240):
    cmd = [DDRUN, "--nodes", str(nodes), "-n", str(n), "--timeout", str(timeout)]
    cmd += ["--plain"] if plain else []
    cmd += ["--", sys.executable, JOB] + list(args)
    p = subprocess.run(cmd, env=_env(extra), capture_output=True, text=True, timeout=timeout + 60)
    return p.returncode, p.stdout, p.stderr


def tagged(out, tag):
    """Every `TAG {json}` record in out, wherever it starts: mpirun forwards
    the ranks' lines through its own pipes and two of them can arrive glued
    ("...}RESULT {...}" or a line break moved), so records are decoded where
    they start, not per line."""
    dec, recs, i = json.JSONDecoder(), [], out.find(tag + " {")
    while i >= 0:
        obj, end = dec.raw_decode(out, i + len(tag) + 1)
        recs.append(obj)
        i = out.find(tag + " {", end)
    return recs


def results(out):
    return tagged(out, "RESULT")


def check_store_run(rc, out, err, n=4, nodes=2, mapped=True):
    assert rc == 0, out + err
    hosts = dict(re.findall(r"^RANK (\d+) (\S+) ok", out, re.M))
    assert {int(r): h for r, h in hosts.items()} == {
        r: "node%d" % nodes_job.node_of(r, n, nodes) for r in range(n)}, out
    # mapped shards: only same-node owners (method 1, DDSTORE_LOG_LEVEL=debug;
    # logged by core's node-local shard service, which maps them)
    maps = re.findall(r"ddstore/core\[(\d+)\] DEBUG: variable '\w+': the shard of rank (\d+) "
                      r"\(\d+ bytes\) is mapped", err)
    if mapped:
        assert maps, err
    for reader, owner in maps:
        assert nodes_job.node_of(int(reader), n, nodes) == nodes_job.node_of(int(owner), n, nodes), \
            "rank %s mapped the shard of rank %s on another node" % (reader, owner)
    # bytes that crossed each node's link >= the rows read from the other node
    counts, _, _ = nodes_job.rows(n)
    cross = 0
    for r in range(n):
        cross += sum(counts[o] for o in range(n)
                     if nodes_job.node_of(o, n, nodes) != nodes_job.node_of(r, n, nodes))
    cross *= nodes_job.DISP * 4     # 3 batches and one get() per row
    res = results(out)
    assert len(res) == 1, out
    for node in range(nodes):
        assert res[0]["link"][str(node)] >= cross, (res[0], cross)
    prof = res[0]["profile"]
    assert prof["bytes"] - prof["local_bytes"] > 0, prof


DEBUG = {"DDSTORE_LOG_LEVEL": "debug", "DDSTORE_LOG_SUBSYS": "ofi,core"}


def test_method1_tcp_mpi():
    """Method 1 over tcp, 2 nodes x 2 ranks (mpirun): every byte right,
    same-node owners mapped, the others read over the links."""
    check_store_run(*run_nodes(["store", "1"], dict(DEBUG, DDSTORE_FABRIC="tcp")))


def test_method1_filecomm_plain(tmp_path):
    """The same over a FileComm in plain processes (no MPI)."""
    check_store_run(*run_nodes(["store", "1", "--comm", "file", str(tmp_path / "fc")],
                               dict(DEBUG, DDSTORE_FABRIC="tcp"), plain=True))


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="method 0 needs MPI (HAVE_MPI False)")
def test_method0_mpi():
    """Method 0: one-sided windows across nodes (Open MPI osc/ucx over tcp)."""
    check_store_run(*run_nodes(["store", "0"]), mapped=False)


def test_method2_core_node0_readers_node1(tmp_path):
    """Method 2: the core job (2 ranks, FileComm) on node0, serving on eth0;
    readers on node1 check every value; the rows cross the links."""
    hs = str(tmp_path / "hs")
    rc, out, err = run_nodes(["m2", hs], {"DDSTORE_FABRIC": "tcp", "FABRIC_IFACE": "eth0"},
                             plain=True)
    assert rc == 0, out + err
    assert len(re.findall(r"^RANK [23] node1 reader ok", out, re.M)) == 2, out + err
    res = results(out)
    assert len(res) == 2, out
    rows_bytes = nodes_job.rows(2)[2] * nodes_job.DISP * 3
    for r in res:
        assert r["profile"]["bytes"] == rows_bytes and r["profile"]["local_bytes"] == 0, r
        assert r["link"]["1"] >= rows_bytes, r


def test_method2_local_only_core_refuses_remote_reader(tmp_path):
    """A core job whose ranks all run on node0, with no interface named,
    serves on 127.0.0.1: a reader on node1 gets the clear error, not a hang."""
    hs = str(tmp_path / "hs")
    rc, out, err = run_nodes(["m2", hs], {"DDSTORE_FABRIC": "tcp",
                                          "DDSTORE_HANDSHAKE_TIMEOUT_S": "60"}, plain=True)
    assert rc != 0
    assert "serves on 127.0.0.1 only" in out + err and "node1" in out + err, out + err


# ---- faults on node1's link (method 1 over tcp, FileComm, plain processes) ----
# DDSTORE_READ_TIMEOUT_S is short here so that the link can stay down longer.
FAULT_ENV = {"DDSTORE_FABRIC": "tcp", "DDSTORE_READ_TIMEOUT_S": "4"}


def run_fault(case, tmp_path, keep_going=False, env=None):
    cmd_extra = ["--keep-going"] if keep_going else []
    cmd_extra += ["--delay", "0"] if case.startswith("delay") else []
    cmd = [DDRUN, "--nodes", "2", "-n", "4", "--timeout", "240", "--plain", *cmd_extra, "--",
           sys.executable, JOB, "fault", case, str(tmp_path)]
    p = subprocess.run(cmd, env=_env(dict(FAULT_ENV, **(env or {}))), capture_output=True,
                       text=True, timeout=300)
    reps = tagged(p.stdout, "FAULT")
    return p.returncode, p.stdout + p.stderr, reps


def _have_nft():
    return subprocess.run(["sh", "-c", "command -v nft"], capture_output=True).returncode == 0


@pytest.mark.parametrize("case", ["loss1", "loss10", "rate"] + sorted(nodes_job.DELAYS))
def test_lossy_slow_or_delayed_link_reads_every_row_right(tmp_path, case):
    """1 % or 10 % of node1's packets dropped (nftables, both ways), its
    link limited to 20 Mbit/s (tc tbf, both ways), or every connection
    between the nodes held 50 us, 1 ms or 20 ms each way (ddrun --delay: a
    relay per node, no netem here): every read returns the right rows
    (checked byte by byte in the job)."""
    if case.startswith(("loss", "delay")) and not _have_nft():
        pytest.skip("nft not installed (Debian package nftables; ./ddstore setup installs it)")
    rc, out, reps = run_fault(case, tmp_path)
    assert rc == 0, out
    assert sorted(r["rank"] for r in reps) == [0, 1, 2, 3], out
    for r in reps:
        assert r["ok"] == 4 and not r["errors"] and r["recovered"], r
    if case.startswith("loss"):
        assert [r["dropped"] for r in reps if r["rank"] == 0][0] > 0, reps   # the rule acted


def test_delay_longer_than_the_read_timeout(tmp_path):
    """A one-way delay of 3 x DDSTORE_READ_TIMEOUT_S (1 s): reads that need
    the other node fail with the timeout error naming the setting (never a
    wrong row, never a hang: the run's own timeout bounds it); with the delay
    back to 0 every rank reads every row again."""
    if not _have_nft():
        pytest.skip("nft not installed (Debian package nftables; ./ddstore setup installs it)")
    rc, out, reps = run_fault("delay-long", tmp_path, env={"DDSTORE_READ_TIMEOUT_S": "1"})
    assert rc == 0, out
    assert sorted(r["rank"] for r in reps) == [0, 1, 2, 3], out
    for r in reps:
        assert r["recovered"] and r["ok"] == 0 and len(r["errors"]) == 2, r
        for e in r["errors"]:
            assert "DDSTORE_READ_TIMEOUT_S" in e and "provider tcp" in e, e


def test_link_down_briefly_mid_epoch(tmp_path):
    """node1's link down for 1 s (< DDSTORE_READ_TIMEOUT_S) while every rank
    reads: reads return the right rows or a clear error, then read again."""
    rc, out, reps = run_fault("down-short", tmp_path)
    assert rc == 0, out
    assert len(reps) == 4, out
    for r in reps:
        assert r["recovered"] and r["ok"] > 0, r
        for e in r["errors"]:
            assert "DDSTORE_READ_TIMEOUT_S" in e, e


def test_link_down_longer_than_the_read_timeout(tmp_path):
    """node1's link down for 3 x DDSTORE_READ_TIMEOUT_S: reads that need the
    other node fail with the timeout error (never a wrong row, never a hang:
    the run's own timeout bounds it), and once the link is back every rank
    reads every row again."""
    rc, out, reps = run_fault("down-long", tmp_path)
    assert rc == 0, out
    assert len(reps) == 4, out
    for r in reps:
        assert r["recovered"], r
        assert r["errors"], r       # 12 s down: some read of every rank timed out
        for e in r["errors"]:
            assert "DDSTORE_READ_TIMEOUT_S" in e and "provider tcp" in e, e


def test_node_killed_mid_epoch(tmp_path):
    """Every process of node1 killed (its ranks 2 and 3): reads of their rows
    on node0 fail with an error naming the rank read from."""
    rc, out, reps = run_fault("kill", tmp_path, keep_going=True)
    assert "KILLED" in out, out
    assert sorted(r["rank"] for r in reps) == [0, 1], out
    for r in reps:
        assert r["node1"] == [2, 3]
        for owner, e in zip(r["node1"], r["errors"]):
            assert "DDStoreError" not in e and "read returned" not in e, e
            assert "reading from rank %d" % owner in e, e


def test_ddrun_nodes_count_is_decimal():
    """--nodes 09 is nine nodes (bash took it for octal: "value too great for
    base"), each rank on its own."""
    p = subprocess.run([DDRUN, "--nodes", "09", "-n", "9", "--plain", "--", "sh", "-c",
                        "hostname"], env=_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert sorted(p.stdout.split()) == ["node%d" % i for i in range(9)], p.stdout


# ---- ddrun itself killed with KILL -------------------------------------------
def _procs_in(netns):
    """{pid: comm} of the processes whose network namespace is in netns."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{p}/ns/net") in netns:
                with open(f"/proc/{p}/comm") as f:
                    out[int(p)] = f.read().strip()
        except OSError:
            pass
    return out


@pytest.mark.parametrize("plain", [False, True], ids=["mpirun", "plain"])
def test_ddrun_killed_leaves_nothing(plain):
    """tools/ddrun --nodes 2 -n 4 KILLed mid-run: within a few seconds no
    process of the run is left in its nodes (mpirun, node1's sh and orted,
    the ranks) and its run directory is gone."""
    import signal
    import time
    prog = ('echo "STARTED $(hostname) $$ $(readlink /proc/self/ns/net) $DDRUN_NODES_DIR"; '
            'exec sleep 120')
    cmd = [DDRUN, "--nodes", "2", "-n", "4", "--timeout", "200"] + (["--plain"] if plain else [])
    p = subprocess.Popen(cmd + ["--", "sh", "-c", prog], env=_env(), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    started, netns, run_dir = [], set(), None
    try:
        deadline = time.time() + 120
        while len(started) < 4 and time.time() < deadline:
            line = p.stdout.readline()
            assert line, "ddrun ended before its 4 ranks started: %r" % started
            if line.startswith("STARTED "):
                _, host, pid, ns, run_dir = line.split()
                started.append((host, int(pid)))
                netns.add(ns)
        assert sorted(h for h, _ in started) == ["node0", "node0", "node1", "node1"], started
        assert len(netns) == 2 and os.path.isdir(run_dir), (netns, run_dir)
        before = _procs_in(netns)
        assert {pid for _, pid in started} <= set(before), (started, before)
        os.kill(p.pid, signal.SIGKILL)      # ddrun alone, not its group
        p.wait(timeout=10)
        for _ in range(50):
            left = _procs_in(netns)
            if not left and not os.path.exists(run_dir):
                break
            time.sleep(0.1)
        assert not left, "left in the run's nodes 5 s after ddrun was killed: %s" % left
        assert not os.path.exists(run_dir), "run directory %s left" % run_dir
    finally:
        p.stdout.close()
        for pid in _procs_in(netns):         # never leave them to the next test
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        if run_dir:
            subprocess.run(["rm", "-rf", "--", run_dir])
