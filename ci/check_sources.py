#!/usr/bin/env python3
"""check_sources.py: the pip (CMake) build and Bazel compile the same files.

    ci/check_sources.py            compare; exit 0 when they agree, 1 when not
    ci/check_sources.py --list     print both lists

For each extension module it compares

  Bazel  bazel query 'kind("source file", deps(<module>))', the files of this
         repository (every select() branch: all three GPU backends)
  pip    cmake -DTARGET=<module> -DGPU=all -P cmake/ddstore_sources.cmake,
         the list CMakeLists.txt compiles (same union of GPU backends)

  //python:pyddstore/_core.so          TARGET=core
  //ddstore-torch:_ddstore_torch.so    TARGET=torch

MPI and libfabric are in the pip list when Bazel links them into _core (when
its configure rules found them: HAVE_MPI / HAVE_LIBFABRIC), so both lists
describe the same machine.  Compiled files, headers and the
VERSION files the version headers are generated from all count.

Exit 77 (and a SKIP line) when bazel or cmake is not installed.
"""
import argparse
import os
import shutil
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = [("core", "//python:pyddstore/_core.so"),
           ("torch", "//ddstore-torch:_ddstore_torch.so")]
SKIP = 77


def sh(cmd, timeout=600):
    p = subprocess.run(cmd, cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"check_sources: {' '.join(cmd)} exited {p.returncode}")
    return p.stdout, p.stderr


def bazel_files(target):
    out, _ = sh(["bazel", "query", "--config=ci", f'kind("source file", deps({target}))'])
    files = set()
    for label in out.split():
        if not label.startswith("//"):
            continue  # @local_config_*, @bazel_tools: not this repository's
        pkg, _, name = label[2:].partition(":")
        files.add(f"{pkg}/{name}" if pkg else name)
    return files


def cmake_files(target, mpi, ofi):
    _, err = sh(["cmake", f"-DTARGET={target}", "-DGPU=all", f"-DMPI={'ON' if mpi else 'OFF'}",
                 f"-DOFI={'ON' if ofi else 'OFF'}", "-P",
                 os.path.join(TOP, "cmake", "ddstore_sources.cmake")])
    return {line.strip() for line in err.splitlines() if line.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="print both lists")
    args = ap.parse_args()
    for tool in ("bazel", "cmake"):
        if not shutil.which(tool):
            print(f"SKIP: check_sources: {tool} not installed")
            return SKIP
    bazel = {label: bazel_files(label) for _, label in MODULES}
    # Whether Bazel links ddstore-mpi / ddstore-ofi into _core depends on what
    # its configure rules found (HAVE_MPI, HAVE_LIBFABRIC); ask the pip list
    # for the same configuration.
    core = bazel[MODULES[0][1]]
    mpi = any(f.startswith("ddstore-mpi/") for f in core)
    ofi = any(f.startswith("ddstore-ofi/") for f in core)
    print(f"check_sources: Bazel links MPI={mpi} libfabric={ofi}; GPU backends: all")
    bad = 0
    for target, label in MODULES:
        b = bazel[label]
        c = cmake_files(target, mpi, ofi)
        if args.list:
            print(f"{label}: bazel {len(b)} files, pip {len(c)} files")
            for f in sorted(b | c):
                print(f"  {'B' if f in b else ' '}{'P' if f in c else ' '} {f}")
        if b == c:
            print(f"ok: {label}: Bazel and the pip build agree on {len(b)} files")
            continue
        bad += 1
        print(f"FAIL: {label}: the builds differ (fix cmake/ddstore_sources.cmake or the BUILD glob)")
        for f in sorted(b - c):
            print(f"  only Bazel:     {f}")
        for f in sorted(c - b):
            print(f"  only pip build: {f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
