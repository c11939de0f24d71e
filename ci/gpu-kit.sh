#!/usr/bin/env bash
# ci/gpu-kit.sh - assemble what the lent GPU machine lacks, for
# `ci/gpu-check.sh --kit DIR` there.
#
# The lent machine (docs/testing.md, "The GPU check") has CUDA's nvcc, a
# Python with torch, numpy, pytest, mpi4py, CMake, ninja and
# scikit-build-core, but no MPI, no libfabric, no apt and no network.  The
# sources travel with the working tree; this script fetches, here, the rest:
#
#   DIR/wheels/  mpich (mpicc, mpiexec, mpi.h, libmpi, libfabric.so.1 with
#                its providers) and mpi4py built for the CPython versions
#                named by --python (default: this machine's and 3.12, the
#                lent machine's), installed there with pip --no-index
#   DIR/MANIFEST.txt  what is in the kit, sizes and sha256
#
# libfabric's headers are not in the wheel: the build uses the vendored ones
# (third_party/libfabric/include).  The kit must fit, with the working tree,
# in the device tool's 64 MiB: this script fails above --max-mib (48).
#
# Usage: ci/gpu-kit.sh [DIR] [--python X.Y]... [--max-mib N]
#   DIR default out/gpu-kit (ignored by git).  Reuses wheels already there.
# Then:  the device tool's run, carry ["out/gpu-kit"], command
#        ci/gpu-check.sh --kit out/gpu-kit
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DIR=""
PYS=()
MAX_MIB=48
while [ $# -gt 0 ]; do
    case "$1" in
    --python) PYS+=("${2:?--python needs X.Y}"); shift 2 ;;
    --max-mib) MAX_MIB="${2:?}"; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu-kit: unknown option $1" >&2; exit 2 ;;
    *) DIR="$1"; shift ;;
    esac
done
DIR=${DIR:-$ROOT/out/gpu-kit}
PY=${DDSTORE_PYTHON:-}
[ -n "$PY" ] || { [ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"; } || PY=python3
HERE_PY=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ ${#PYS[@]} -gt 0 ] || PYS=("$HERE_PY" 3.12)

MPICH_SPEC="mpich==5.0.2"
MPI4PY_SPEC="mpi4py==4.1.2"
W="$DIR/wheels"
mkdir -p "$W"
say() { echo "gpu-kit: $*"; }

dl() { # pip download ARGS... (binary wheels only, no dependencies)
    "$PY" -m pip download -q --no-deps --only-binary :all: -d "$W" "$@" 2>&1 |
        { grep -v "^WARNING: Location '" || true; }
    return "${PIPESTATUS[0]}"
}
dl --platform manylinux_2_28_x86_64 "$MPICH_SPEC"
for v in $(printf '%s\n' "${PYS[@]}" | sort -u); do
    dl --platform manylinux_2_17_x86_64 --platform manylinux1_x86_64 \
        --python-version "$v" --implementation cp --abi "cp${v/./}" "$MPI4PY_SPEC"
done

{
    echo "# ddstore GPU-check kit ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
    echo "# install: ci/gpu-check.sh --kit $(realpath --relative-to="$ROOT" "$DIR" 2>/dev/null || echo "$DIR")"
    (cd "$W" && for f in *.whl; do
        printf '%s  %s  %s\n' "$(sha256sum "$f" | cut -c1-16)" "$(stat -c %s "$f")" "$f"
    done)
} >"$DIR/MANIFEST.txt"
sed 's/^/gpu-kit:   /' "$DIR/MANIFEST.txt"
kib=$(du -sk "$DIR" | cut -f1)
say "$DIR: $((kib / 1024)) MiB (limit $MAX_MIB MiB; the working tree travels with it)"
[ "$kib" -le $((MAX_MIB * 1024)) ] || { say "error: the kit is larger than $MAX_MIB MiB" >&2; exit 1; }
