"""ddstore-handshake: inspect method-2 handshake records.

    ddstore-handshake PATH...     a record file (*.ddshs) or a
                                  handshake directory (every record)
    ddstore-handshake --json PATH...

(the console command of the pip package; tools/ddstore-handshake in a
checkout; python -m pyddstore.handshake anywhere)

For each record: the variable, its layout, the core run (id, namespace, age,
provider, domain) and every core rank (host, pid, rows, and on this host
whether that process still runs).  Records are checked by the same parser
join() uses; a damaged one is reported with the field that is wrong and the
exit status is 1.  Exit status 2: usage error or a build without libfabric.
"""
import argparse
import json
import os
import socket
import sys
import time

SUFFIX = ".ddshs"


def _files(paths):
    for p in paths:
        if os.path.isdir(p):
            for f in sorted(os.listdir(p)):
                if f.endswith(SUFFIX):
                    yield os.path.join(p, f)
        else:
            yield p


def _describe(rec, core):
    me = socket.gethostname()
    age = time.time() - rec["ctime_ns"] / 1e9
    ragged = bool(rec["flags"] & 2)        # DDOFI_HS_FLAG_RAGGED
    kind = "ragged samples of element rows" if ragged else "rows"
    out = [f"name {rec['name']}: {rec['total_rows']} {'samples' if ragged else 'rows'} x "
           f"{rec['disp']} {rec['dtype']} (itemsize {rec['itemsize']}, {rec['row_bytes']} B "
           f"per {'element row' if ragged else 'row'}; {kind}) on {rec['nranks']} ranks",
           f"  core run {rec['run_id']:016x}, namespace '{rec['exchange_ns']}', written "
           f"{age:.0f} s ago, format version {rec['version']}",
           f"  provider {rec['provider']}, domain {rec['domain']}"
           + (", 127.0.0.1 only" if rec["flags"] & 1 else "")]
    for i, r in enumerate(rec["ranks"]):
        state = ""
        if r["host"] == me:
            alive = core._handshake_process_alive(r["pid"], r["start_ticks"])
            state = {1: ", running", 0: ", EXITED (stale record)", -1: ""}[alive]
        out.append(f"  rank {i}: {r['rows']} {'samples' if ragged else 'rows'}, "
                   f"{r['bytes']} B at 0x{r['base']:x} "
                   f"key 0x{r['key']:x}, pid {r['pid']} on {r['host']}{state}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="ddstore-handshake", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--json", action="store_true", help="one JSON object per record")
    args = ap.parse_args(argv)
    try:
        from pyddstore import _core as core
    except ImportError as e:
        print(f"ddstore-handshake: cannot import pyddstore: {e}", file=sys.stderr)
        return 2
    if not hasattr(core, "_handshake_parse"):
        print("ddstore-handshake: this build of pyddstore has no libfabric (no method 2)",
              file=sys.stderr)
        return 2
    bad = 0
    for f in _files(args.paths):
        try:
            # never blocks on a FIFO, never follows a link (the checks join makes)
            data = core._file_read(f, 1 << 30, "handshake record")
            if data is None:
                raise FileNotFoundError(f"{f} does not exist")
            rec = core._handshake_parse(data, f)
        except Exception as e:  # noqa: BLE001
            print(f"ddstore-handshake: {e}" if f in str(e) else f"ddstore-handshake: {f}: {e}",
                  file=sys.stderr)
            bad += 1
            continue
        if args.json:
            rec = dict(rec, ranks=[{k: v for k, v in r.items() if not k.endswith("_blob")}
                                   for r in rec["ranks"]])
            print(json.dumps(dict(rec, file=f)))
        else:
            print(f"{f}\n{_describe(rec, core)}")
    return 1 if bad else 0


def _run():
    """The console command (pyproject.toml [project.scripts])."""
    return main()


if __name__ == "__main__":
    sys.exit(main())
