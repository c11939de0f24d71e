#!/usr/bin/env python3
"""Run the code blocks of README.md, docs/*.md and each library's README.md (*/README.md)
as a user would copy them.

    ci/doc_snippets.py [--list] [--junit DIR] [--only SUBSTR] [FILE.md ...]

The info string of a fenced block says what happens to it:

    ```python ranks=4        run under tools/ddrun -n 4 (any N >= 1)
    ```python                run in one plain Python process (no launcher)
    ```bash run              run with bash at the top of the tree
    ```python norun          shown only (a fragment, a signature, a cluster-only
    ```bash                  setup ...): every other language is shown only too

A run block may add `timeout=S` (seconds) for a block that takes longer than
the default, such as the pip route of docs/installation.md.

So a new Python block runs unless it says otherwise, and a block that stops
working fails the suite.  Each block runs in a fresh temporary directory with
the tree's virtualenv first on PATH (python, python3 = .venv/bin/python),
DDSTORE_* settings of the caller removed, and a timeout (DOC_SNIPPET_TIMEOUT,
default 300 s).  With --junit DIR one JUnit XML file per run is written there
(one test case per block, named FILE:LINE) for ci/run_tests.py to count.
Exit status: non-zero if a block failed.
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DDRUN = os.path.join(TOP, "tools", "ddrun")
FENCE = re.compile(r"^(\s*)```(.*)$")


class Block:
    def __init__(self, path, line, lang, opts, code):
        self.path, self.line, self.lang, self.opts, self.code = path, line, lang, opts, code

    @property
    def name(self):
        return f"{os.path.relpath(self.path, TOP)}:{self.line}"

    def mode(self):
        """('python', ranks) | ('bash', 0) | None (shown only)."""
        if "norun" in self.opts:
            return None
        if self.lang == "python":
            return ("python", int(self.opts.get("ranks", 0)))
        if self.lang in ("bash", "sh") and "run" in self.opts:
            return ("bash", 0)
        return None


def blocks(path):
    """The fenced blocks of a Markdown file."""
    out, cur = [], None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if cur is None:
                if m:
                    words = m.group(2).split()
                    lang = words[0].lower() if words else ""
                    opts = {}
                    for w in words[1:]:
                        k, _, v = w.partition("=")
                        opts[k] = v
                    cur = (m.group(1), n, lang, opts, [])
            elif m and m.group(2).strip() == "" and len(m.group(1)) <= len(cur[0]):
                indent, start, lang, opts, lines = cur
                code = "".join(l[len(indent):] if l.startswith(indent) else l for l in lines)
                out.append(Block(path, start, lang, opts, code))
                cur = None
            else:
                cur[4].append(line)
    return out


def environment():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DDSTORE_", "OMPI_COMM_WORLD", "PMI_", "PMIX_", "SLURM_"))}
    venv_bin = os.path.join(TOP, ".venv", "bin")
    env["PATH"] = venv_bin + os.pathsep + env.get("PATH", "")
    env["DDSTORE_PROGRESS"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_block(b, timeout):
    mode = b.mode()
    with tempfile.TemporaryDirectory(prefix="ddsnip.") as d:
        if mode[0] == "python":
            script = os.path.join(d, "snippet.py")
            with open(script, "w") as f:
                f.write(b.code)
            py = os.path.join(TOP, ".venv", "bin", "python")
            if not os.path.exists(py):
                py = sys.executable
            cmd = [py, script]
            if mode[1] >= 1:
                cmd = [DDRUN, "-n", str(mode[1]), "--timeout", str(timeout), "--"] + cmd
            cwd = d
        else:
            script = os.path.join(d, "snippet.sh")
            with open(script, "w") as f:
                f.write("set -euo pipefail\n" + b.code)
            cmd = ["bash", script]
            cwd = TOP
        t0 = time.time()
        try:
            p = subprocess.run(cmd, cwd=cwd, env=environment(), capture_output=True,
                               text=True, errors="replace", timeout=timeout + 30)
            rc, out = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            rc, out = 124, f"timed out after {timeout} s\n{e.stdout or ''}{e.stderr or ''}"
        return rc, out, time.time() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--list", action="store_true", help="list the blocks and what happens")
    ap.add_argument("--junit", help="write a JUnit XML file into this directory")
    ap.add_argument("--only", help="run only blocks whose FILE:LINE contains this")
    a = ap.parse_args()
    files = a.files or ([os.path.join(TOP, "README.md")] +
                        sorted(glob.glob(os.path.join(TOP, "docs", "*.md"))) +
                        sorted(glob.glob(os.path.join(TOP, "*", "README.md"))))
    timeout = int(os.environ.get("DOC_SNIPPET_TIMEOUT", "300"))
    todo = [b for f in files for b in blocks(f)]
    if a.list:
        for b in todo:
            m = b.mode()
            what = "shown" if m is None else (
                f"python, {m[1]} ranks" if m[0] == "python" and m[1] else
                "python, one process" if m[0] == "python" else "bash")
            print(f"{b.name:40s} {b.lang or '-':8s} {what}")
        return 0
    suite = ET.Element("testsuite", name="doc_snippets")
    failed = ran = 0
    for b in todo:
        if b.mode() is None or (a.only and a.only not in b.name):
            continue
        rc, out, secs = run_block(b, int(b.opts.get("timeout") or timeout))
        ran += 1
        case = ET.SubElement(suite, "testcase", classname="doc_snippets", name=b.name,
                             time=f"{secs:.1f}")
        status = "ok" if rc == 0 else f"FAILED (exit {rc})"
        print(f"{b.name}: {status} ({secs:.0f} s)", flush=True)
        if rc != 0:
            failed += 1
            ET.SubElement(case, "failure", message=f"exit {rc}").text = out[-20000:]
            print("  " + "\n  ".join(out.rstrip().splitlines()[-40:]), flush=True)
    suite.set("tests", str(ran))
    suite.set("failures", str(failed))
    if a.junit:
        os.makedirs(a.junit, exist_ok=True)
        ET.ElementTree(suite).write(os.path.join(a.junit, "doc_snippets.xml"))
    print(f"doc snippets: {ran - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
