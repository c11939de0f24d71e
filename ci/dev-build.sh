#!/usr/bin/env bash
# Development build of libddstore.so and pyddstore._core (which links it,
# RUNPATH $ORIGIN) with gcc, into python/pyddstore/.  Stop-gap until the
# Bazel build works (`./ddstore build` replaces it).  Without libfabric.
#
#   ci/dev-build.sh            MPI build when mpicc and ddstore-mpi exist
#   DDSTORE_MPI=0 ci/dev-build.sh   build without MPI (HAVE_MPI False)
#   DDSTORE_GPU=cuda|hip ci/dev-build.sh   ddstore-gpu's CUDA / HIP backend
#                                  (default none: no GPU support; CUDA_HOME,
#                                  default /usr/local/cuda; ROCM_PATH)
#   PYTHON=... CC=... CFLAGS=...  override the interpreter / compiler / flags
#   OUT=path/_core.so             write the module elsewhere (libddstore.so
#                                 goes next to it)
#   DDSTORE_TEST_HOOKS=0          without the test hooks (as a release build)
set -euo pipefail
TOP=$(cd "$(dirname "$0")/.." && pwd)
cd "$TOP"
PY=${PYTHON:-$TOP/.venv/bin/python}
CC=${CC:-gcc}
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
EXT=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
OUT=${OUT:-python/pyddstore/_core$EXT}

shopt -s nullglob
pysrcs=(python/pyddstore/csrc/*.c)
srcs=(libddstore/src/*.c ddstore-core/src/*.c ddstore-gpu/src/ddgpu_common.c ddstore-gpu/src/ddgpu_stream.c ddstore-gpu/src/ddgpu_copy.c ddstore-gpu/src/ddgpu_staging.c ddstore-gpu/src/ddgpu_memsys.c)
incs=(-Ipython/pyddstore/csrc -Ilibddstore/include -Iddstore-core/include -Iddstore-core/src -Iddstore-gpu/include -I"$PYINC")
defs=(-DDDGPU_VERSION="\"$(tr -d ' \t\r\n' <ddstore-gpu/VERSION)\""
      -DDDSTORE_HUB_VERSION="\"$(tr -d ' \t\r\n' <libddstore/VERSION)\""
      -DPYDDSTORE_VERSION="\"$(tr -d ' \t\r\n' <python/VERSION)\"")
# a dev build: test hooks on (DDSTORE_TEST_HOOKS=0: as a release build)
[ "${DDSTORE_TEST_HOOKS:-1}" != 0 ] && defs+=(-DDDSTORE_TEST_HOOKS)
mpi=()
gpu=()
case "${DDSTORE_GPU:-none}" in
none) srcs+=(ddstore-gpu/src/ddgpu_none.c) ;;
cuda) CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
      srcs+=(ddstore-gpu/src/ddgpu_rt.c); defs+=(-DDDSTORE_WITH_CUDA); incs+=(-I"$CUDA_HOME/include")
      gpu=(-L"$CUDA_HOME/lib64" -Wl,-rpath,"$CUDA_HOME/lib64" -lcudart) ;;
hip)  ROCM_PATH=${ROCM_PATH:-/usr}
      srcs+=(ddstore-gpu/src/ddgpu_rt.c); defs+=(-DDDSTORE_WITH_HIP -D__HIP_PLATFORM_AMD__)
      [ "$ROCM_PATH" != /usr ] && incs+=(-I"$ROCM_PATH/include") && gpu=(-L"$ROCM_PATH/lib" -Wl,-rpath,"$ROCM_PATH/lib")
      gpu+=(-lamdhip64) ;;
*) echo "dev-build: DDSTORE_GPU must be none, cuda or hip" >&2; exit 2 ;;
esac
if [ "${DDSTORE_MPI:-1}" != 0 ] && command -v mpicc >/dev/null 2>&1 \
   && [ -n "$(echo ddstore-mpi/src/*.c)" ]; then
    srcs+=(ddstore-mpi/src/*.c)
    incs+=(-Iddstore-mpi/include -Iddstore-mpi/src)
    defs+=(-DHAVE_MPI=1)
    if mpicc --showme:compile >/dev/null 2>&1; then        # Open MPI
        read -r -a mpic <<<"$(mpicc --showme:compile)"
        read -r -a mpil <<<"$(mpicc --showme:link)"
    else                                                   # MPICH
        read -r -a mpic <<<"$(mpicc -compile_info | cut -d' ' -f2-)"
        read -r -a mpil <<<"$(mpicc -link_info | cut -d' ' -f2-)"
    fi
    mpi=("${mpic[@]}" "${mpil[@]}")
fi
[ -n "$(echo ddstore-core/src/*.c)" ] || { echo "dev-build: ddstore-core/src has no sources yet" >&2; exit 1; }
# Build next to the destination, then rename: a process that has the old
# module mapped keeps a valid file.
LIB="$(dirname "$OUT")/libddstore.so"
TMP="$OUT.tmp.$$"
trap 'rm -f "$TMP" "$LIB.tmp.$$"' EXIT
set -x
$CC -std=gnu11 -O2 -g -fPIC -shared -fvisibility=hidden -DDDSTORE_BUILD_SHARED -Wall -Wextra \
    -Wno-unused-parameter -Wno-missing-field-initializers ${CFLAGS:-} \
    "${defs[@]}" "${incs[@]}" "${srcs[@]}" "${mpi[@]}" "${gpu[@]}" -lpthread \
    -Wl,-soname,libddstore.so -o "$LIB.tmp.$$"
mv -f "$LIB.tmp.$$" "$LIB"
$CC -std=gnu11 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra \
    -Wno-unused-parameter -Wno-missing-field-initializers ${CFLAGS:-} \
    "${defs[@]}" "${incs[@]}" "${pysrcs[@]}" "${mpi[@]}" -L"$(dirname "$LIB")" -lddstore \
    -Wl,-rpath,'$ORIGIN' -lpthread -o "$TMP"
mv -f "$TMP" "$OUT"
