#!/usr/bin/env bash
# build-exts.sh: build libddstore.so and pyddstore's two extension modules
# with Bazel and put them where `import pyddstore` finds them.
#
#   ci/build-exts.sh [BAZEL FLAGS...]     e.g. --config=nompi, --config=cuda, -c dbg
#
# 1. bazel build -c opt FLAGS //:pyddstore_exts   (FLAGS come last and win)
# 2. copies bazel-bin/libddstore/lib/libddstore.so   -> python/pyddstore/libddstore.so
#           bazel-bin/python/pyddstore/_core.so      -> python/pyddstore/_core<EXT_SUFFIX>
#           bazel-bin/ddstore-torch/_ddstore_torch.so -> python/pyddstore/_ddstore_torch<EXT_SUFFIX>
#    (the torch one only when torch was found; a stale copy is removed).
#    Both modules load libddstore.so from their own directory (RUNPATH
#    $ORIGIN): one copy of the C libraries per process.
# 3. writes <venv>/lib/python3.X/site-packages/pyddstore.pth = <repo>/python,
#    so the virtualenv imports pyddstore from this tree.
#
# The interpreter: $DDSTORE_PYTHON, else <repo>/.venv/bin/python, else python3.
# It is exported as DDSTORE_PYTHON so Bazel's configure rules use the same one.
set -euo pipefail

TOP="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$TOP"

die() { echo "build-exts: error: $*" >&2; exit 1; }
say() { echo "build-exts: $*"; }

if [ -n "${DDSTORE_PYTHON:-}" ]; then PY="$DDSTORE_PYTHON"
elif [ -x "$TOP/.venv/bin/python" ]; then PY="$TOP/.venv/bin/python"
else PY="$(command -v python3)" || die "no Python (set DDSTORE_PYTHON)"; fi
export DDSTORE_PYTHON="$PY"
command -v bazel >/dev/null 2>&1 || die "bazel not found (Debian: apt-get install bazel-bootstrap bazel-rules-java)"

FLAGS=(-c opt "$@")
say "bazel build ${FLAGS[*]} //:pyddstore_exts"
bazel build "${FLAGS[@]}" //:pyddstore_exts
BIN="$(bazel info "${FLAGS[@]}" bazel-bin 2>/dev/null)" || die "bazel info bazel-bin failed"

EXT="$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")')"
DEST="$TOP/python/pyddstore"

# Copy next to the destination, then rename: a running process that has the
# old module mapped keeps a valid file.
install_ext() {
    local src="$1" dst="$2"
    cp -f "$src" "$dst.tmp.$$"
    chmod 0755 "$dst.tmp.$$"
    mv -f "$dst.tmp.$$" "$dst"
    say "installed ${dst#$TOP/}"
}

LIB="$BIN/libddstore/lib/libddstore.so"
[ -f "$LIB" ] || die "$LIB was not built"
install_ext "$LIB" "$DEST/libddstore.so"

CORE="$BIN/python/pyddstore/_core.so"
[ -f "$CORE" ] || die "$CORE was not built"
install_ext "$CORE" "$DEST/_core$EXT"

# bazel-bin may hold a torch extension from an earlier build; trust it only
# when the configure rule found torch this time.
TORCH="$BIN/ddstore-torch/_ddstore_torch.so"
TORCH_REPO="$(bazel info output_base 2>/dev/null)/external/local_config_torch"
if grep -q '^HAVE_TORCH = True' "$TORCH_REPO/defs.bzl" 2>/dev/null; then
    [ -f "$TORCH" ] || die "$TORCH was not built"
    install_ext "$TORCH" "$DEST/_ddstore_torch$EXT"
else
    rm -f "$DEST"/_ddstore_torch*.so
    say "no torch extension: $(cat "$TORCH_REPO/STATUS" 2>/dev/null || echo 'torch not found')"
fi

# Point the virtualenv at the tree (only a virtualenv: never a system Python).
SITE="$("$PY" -c 'import sys, sysconfig
print(sysconfig.get_paths()["purelib"] if sys.prefix != sys.base_prefix else "")')"
if [ -n "$SITE" ]; then
    mkdir -p "$SITE"
    printf '%s\n' "$TOP/python" > "$SITE/pyddstore.pth"
    say "wrote ${SITE}/pyddstore.pth -> $TOP/python"
else
    say "$PY is not a virtualenv: not writing a .pth; use PYTHONPATH=$TOP/python"
fi
