#!/usr/bin/env bash
# Dev build of the torch extension (until Bazel builds it): compiles
# ddstore-torch/csrc/*.cpp into python/pyddstore/_ddstore_torch<EXT_SUFFIX>
# against the venv's torch.  Like the Bazel rule, it links libddstore.so
# (python/pyddstore/libddstore.so: run ci/dev-build.sh first), RUNPATH
# $ORIGIN.
#
#   ci/dev-build-torch.sh            # build (skips when up to date)
#   FORCE=1 ci/dev-build-torch.sh    # rebuild
#   JOBS=2 (default) parallel compiles
set -euo pipefail
TOP="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$TOP"
PY="${DDSTORE_PYTHON:-$TOP/.venv/bin/python}"
CXX="${CXX:-g++}"
JOBS="${JOBS:-2}"

eval "$("$PY" - <<'PYEOF'
import sysconfig, torch, torch.utils.cpp_extension as ce
print("EXT=%s" % sysconfig.get_config_var("EXT_SUFFIX"))
print("PYINC=%s" % sysconfig.get_paths()["include"])
print("TINC=(%s)" % " ".join("'-isystem%s'" % p for p in ce.include_paths()))
print("TLIB=%s" % ce.library_paths()[0])
print("ABI=%d" % int(torch._C._GLIBCXX_USE_CXX11_ABI))
PYEOF
)"
VERSION="$(cat ddstore-torch/VERSION)"
OUT="python/pyddstore/_ddstore_torch$EXT"
OBJ="build/ddstore-torch"
mkdir -p "$OBJ/include/ddstore"
# ddstore/torch_version.h, as Bazel's :torch_version and CMake generate it
printf '#define DDSTORE_TORCH_VERSION "%s"\n' "$VERSION" >"$OBJ/include/ddstore/torch_version.h.new"
cmp -s "$OBJ/include/ddstore/torch_version.h.new" "$OBJ/include/ddstore/torch_version.h" \
    && rm "$OBJ/include/ddstore/torch_version.h.new" \
    || mv "$OBJ/include/ddstore/torch_version.h.new" "$OBJ/include/ddstore/torch_version.h"
SRCS=(ddstore-torch/csrc/*.cpp)
HDRS=(ddstore-torch/csrc/*.h libddstore/include/ddstore/*.h ddstore-core/include/ddstore/*.h
      "$OBJ/include/ddstore/torch_version.h")

CXXFLAGS=(-O2 -g -std=c++17 -fPIC -fvisibility=hidden -Wall -Wextra -Wno-unused-parameter
          -DTORCH_EXTENSION_NAME=_ddstore_torch -DTORCH_API_INCLUDE_EXTENSION_H
          "-D_GLIBCXX_USE_CXX11_ABI=$ABI" -I"$OBJ/include"
          -Iddstore-torch/csrc -Ilibddstore/include -Iddstore-core/include
          -Iddstore-gpu/include
          "-I$PYINC" "${TINC[@]}")

newest_hdr=0
for h in "${HDRS[@]}"; do t=$(stat -c %Y "$h"); [ "$t" -gt "$newest_hdr" ] && newest_hdr=$t; done

objs=(); pids=()
for s in "${SRCS[@]}"; do
    o="$OBJ/$(basename "${s%.cpp}").o"; objs+=("$o")
    if [ -z "${FORCE:-}" ] && [ -f "$o" ] && [ "$o" -nt "$s" ] && [ "$(stat -c %Y "$o")" -ge "$newest_hdr" ]; then
        continue
    fi
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    echo "dev-build-torch: $CXX $s"
    "$CXX" "${CXXFLAGS[@]}" -c "$s" -o "$o" &
done
wait
for o in "${objs[@]}"; do [ -f "$o" ] || { echo "dev-build-torch: $o missing" >&2; exit 1; }; done

relink=1
if [ -f "$OUT" ]; then
    relink=0; for o in "${objs[@]}"; do [ "$o" -nt "$OUT" ] && relink=1; done
fi
if [ "$relink" = 1 ] || [ -n "${FORCE:-}" ]; then
    echo "dev-build-torch: link $OUT"
    "$CXX" -shared -o "$OUT" "${objs[@]}" -Lpython/pyddstore -lddstore "-Wl,-rpath,\$ORIGIN" \
        "-L$TLIB" "-Wl,-rpath,$TLIB" -lc10 -ltorch -ltorch_cpu -ltorch_python
fi
echo "dev-build-torch: $OUT"
