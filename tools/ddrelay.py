#!/usr/bin/env python3
"""ddrelay: a TCP relay that delays every byte by a fixed time, for
`tools/ddrun --nodes K --delay D` (this kernel has no netem; see
docs/testing.md, "Simulated nodes").

    ddrelay.py --port P --delay-file F --ready FILE [--mark M]

Runs inside one simulated node.  ddrun's nftables rule in the node
(`nat` table, `output` hook) redirects every TCP connection the node opens
to another node's address to 127.0.0.1:P; the relay accepts it, learns the
original destination (getsockopt SO_ORIGINAL_DST), opens its own connection
there (SO_MARK M: the rule lets marked packets through, so the relay's own
connections are not redirected again) and forwards both directions, each
chunk held until D seconds after it was received: chunks are timestamped
on receipt and sent at receipt + D in order, so a stream of chunks is
delayed by D once, not by D per chunk.  The connection itself is opened
D after the client's connect (the SYN's way out).  D is read from
--delay-file (seconds, a float) when it changes, so a run can vary it
(`$DDRUN_NODES_DIR/delay 1ms`); a chunk keeps the delay current at its
receipt.

What it is not: a packet-level emulator.  The kernel of each end still
sees a fast loopback/veth path (its RTT estimate, congestion window and
retransmission timers see the relay, not the delay), and a connection's
handshake completes at the relay before the far end has accepted it (a
refused connection is seen as one reset after connecting).  Same-node
connections and connections the other node opens are not relayed here
(the other node's relay holds those): every TCP connection between two
nodes crosses exactly one relay, one-way delay D, round trip + 2 D.
"""
import argparse
import collections
import ctypes
import os
import socket
import struct
import sys
import threading
import time

SO_ORIGINAL_DST = 80
CHUNK = 256 * 1024


class Delay:
    """The current delay, re-read from a file when its mtime changes."""

    def __init__(self, path):
        self.path, self.mtime, self.value = path, None, 0.0
        self.lock = threading.Lock()
        self.poll()

    def poll(self):
        try:
            m = os.stat(self.path).st_mtime_ns
            if m != self.mtime:
                with open(self.path) as f:
                    v = float(f.read().strip() or 0)
                with self.lock:
                    self.value, self.mtime = max(0.0, v), m
        except (OSError, ValueError):
            pass

    def get(self):
        with self.lock:
            return self.value


def set_timer_slack():
    """1 ns timer slack for this thread (and the threads it starts): sleeps
    of tens of microseconds otherwise end up to 50 us late."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, ctypes.c_ulong(1), 0, 0, 0)  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        pass


def pump(src, dst, delay):
    """src -> dst, every chunk held until its receipt + delay, in order."""
    q = collections.deque()
    cv = threading.Condition()

    def reader():
        try:
            while True:
                data = src.recv(CHUNK)
                t = time.monotonic() + delay.get()
                with cv:
                    q.append((t, data))
                    cv.notify()
                if not data:
                    return
        except OSError:
            with cv:
                q.append((time.monotonic(), None))
                cv.notify()

    def writer():
        try:
            while True:
                with cv:
                    while not q:
                        cv.wait()
                    due, data = q.popleft()
                dt = due - time.monotonic()
                if dt > 0:
                    time.sleep(dt)
                if data is None:        # the reader failed: reset both ends
                    break
                if not data:            # EOF: pass the half-close on
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):            # an error either way ends the connection
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    threading.Thread(target=reader, daemon=True).start()
    w = threading.Thread(target=writer, daemon=True)
    w.start()
    return w


def serve(client, delay, mark):
    try:
        raw = client.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
        port, ip = struct.unpack("!2xH4s8x", raw)
        dest = (socket.inet_ntoa(ip), port)
        d = delay.get()
        if d > 0:
            time.sleep(d)               # the SYN's way out
        up = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        up.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, mark)
        up.connect(dest)
    except OSError:
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()
        return
    for s in (client, up):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    a = pump(client, up, delay)
    b = pump(up, client, delay)
    a.join()
    b.join()
    client.close()
    up.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--delay-file", required=True)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--mark", type=lambda s: int(s, 0), default=0xdd)
    args = ap.parse_args()
    set_timer_slack()
    delay = Delay(args.delay_file)
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", args.port))
    ls.listen(256)

    def watch():
        while True:
            time.sleep(0.05)
            delay.poll()
    threading.Thread(target=watch, daemon=True).start()
    open(args.ready, "w").close()
    while True:
        c, _ = ls.accept()
        threading.Thread(target=serve, args=(c, delay, args.mark), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
