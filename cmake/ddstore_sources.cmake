# ddstore_sources.cmake: the files the pip (CMake) build compiles, by the same
# glob patterns as the Bazel BUILD files, one function per Bazel target.
#
# This file is the pip build's only list of sources.  ci/check_sources.py
# runs it in script mode and compares its answer with what Bazel compiles
# (`bazel query 'kind("source file", deps(...))'`); the wheel stage of the
# suite fails when the two differ.  When you change a glob in a BUILD file,
# change the matching line here (the check tells you which files differ).
#
# Script mode (prints one repo-relative path per line, sorted):
#   cmake -DTARGET=core|torch [-DGPU=none|cuda|rocm|all] [-DMPI=ON|OFF]
#         [-DOFI=ON|OFF] -P cmake/ddstore_sources.cmake
# TARGET=core is pyddstore._core (//python:pyddstore/_core.so), TARGET=torch
# is pyddstore._ddstore_torch (//ddstore-torch:_ddstore_torch.so), each with
# libddstore.so (//libddstore:lib/libddstore.so: every C library) that it
# links; GPU=all is the union of the three backends (what `bazel query`
# reports for a select()).

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  cmake_minimum_required(VERSION 3.18)
endif()

# The source root: this file's parent directory.
get_filename_component(DDS_SOURCE_ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

# _dds_glob(<out> <dir> <pattern>...): files of <dir> matching the patterns
# (absolute, sorted; like Bazel's glob(), no directories).
function(_dds_glob out dir)
  set(files "")
  foreach(p IN LISTS ARGN)
    file(GLOB found LIST_DIRECTORIES false "${DDS_SOURCE_ROOT}/${dir}/${p}")
    list(APPEND files ${found})
  endforeach()
  list(REMOVE_DUPLICATES files)
  list(SORT files)
  set(${out} "${files}" PARENT_SCOPE)
endfunction()

# Each function sets <prefix>_SRCS (compiled, plus private headers),
# <prefix>_HDRS (public headers) and <prefix>_VERSION_FILE where Bazel has a
# dds_version_header.  Generated headers (<lib>_version.h) are excluded from
# the globs exactly as in the BUILD files.

# //ddstore-core:core  (BUILD: srcs glob(["src/*.c", "src/*.h"]),
# hdrs glob(["include/ddstore/*.h"], exclude core_version.h))
function(dds_sources_core prefix)
  _dds_glob(srcs ddstore-core "src/*.c" "src/*.h")
  _dds_glob(hdrs ddstore-core "include/ddstore/*.h")
  list(REMOVE_ITEM hdrs "${DDS_SOURCE_ROOT}/ddstore-core/include/ddstore/core_version.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/ddstore-core/VERSION" PARENT_SCOPE)
endfunction()

# //ddstore-gpu:gpu  (BUILD: glob(["src/*.c", "src/*.h"], exclude BACKENDS)
# + one backend by --config; hdrs glob(["include/ddstore/*.h"], exclude
# gpu_version.h))
function(dds_sources_gpu prefix backend)
  set(backends src/ddgpu_none.c src/ddgpu_rt.c)
  _dds_glob(srcs ddstore-gpu "src/*.c" "src/*.h")
  foreach(b IN LISTS backends)
    list(REMOVE_ITEM srcs "${DDS_SOURCE_ROOT}/ddstore-gpu/${b}")
  endforeach()
  if(backend STREQUAL "cuda")
    _dds_glob(be ddstore-gpu "src/ddgpu_rt.c")
  elseif(backend STREQUAL "rocm")
    _dds_glob(be ddstore-gpu "src/ddgpu_rt.c")
  elseif(backend STREQUAL "none")
    _dds_glob(be ddstore-gpu "src/ddgpu_none.c")
  elseif(backend STREQUAL "all")
    _dds_glob(be ddstore-gpu ${backends})
  else()
    message(FATAL_ERROR "ddstore: GPU backend '${backend}': expected none, cuda or rocm")
  endif()
  list(APPEND srcs ${be})
  list(SORT srcs)
  _dds_glob(hdrs ddstore-gpu "include/ddstore/*.h")
  list(REMOVE_ITEM hdrs "${DDS_SOURCE_ROOT}/ddstore-gpu/include/ddstore/gpu_version.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/ddstore-gpu/VERSION" PARENT_SCOPE)
endfunction()

# //ddstore-mpi:mpi  (BUILD: srcs glob(["src/*.c", "src/*.h"]), hdrs
# glob(["include/ddstore/*.h"], exclude mpi_version.h))
function(dds_sources_mpi prefix)
  _dds_glob(srcs ddstore-mpi "src/*.c" "src/*.h")
  _dds_glob(hdrs ddstore-mpi "include/ddstore/*.h")
  list(REMOVE_ITEM hdrs "${DDS_SOURCE_ROOT}/ddstore-mpi/include/ddstore/mpi_version.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/ddstore-mpi/VERSION" PARENT_SCOPE)
endfunction()

# //ddstore-ofi:ofi  (BUILD: srcs glob(["src/*.c", "src/*.h"]), hdrs
# glob(["include/ddstore/*.h"], exclude *transport*.h and ofi_version.h))
function(dds_sources_ofi prefix)
  _dds_glob(srcs ddstore-ofi "src/*.c" "src/*.h")
  _dds_glob(hdrs ddstore-ofi "include/ddstore/*.h")
  _dds_glob(thdrs ddstore-ofi "include/ddstore/*transport*.h")
  list(REMOVE_ITEM hdrs ${thdrs} "${DDS_SOURCE_ROOT}/ddstore-ofi/include/ddstore/ofi_version.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/ddstore-ofi/VERSION" PARENT_SCOPE)
endfunction()

# //ddstore-ofi:transport  (BUILD: srcs glob(["transport/*.c",
# "transport/*.h"]), hdrs glob(["include/ddstore/*transport*.h"]))
function(dds_sources_ofi_transport prefix)
  _dds_glob(srcs ddstore-ofi "transport/*.c" "transport/*.h")
  _dds_glob(hdrs ddstore-ofi "include/ddstore/*transport*.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
endfunction()

# Transport packages of the standard layout that need nothing but core
# (Bazel: the package's :lib target, a bool flag in //bazel/config, default
# on, and one dep line of //libddstore:ddstore; the hub's backend table has
# their row).  Four entries each: package, library name, version header,
# version macro.  The package's BUILD defines DDSTORE_HAVE_<NAME> for the
# hub (CMakeLists.txt does the same).
set(DDS_TRANSPORT_PACKAGES
  ddstore-loop loop loop_version.h DDLOOP_VERSION
)

# //<package>:<name>  (BUILD: srcs glob(["src/*.c", "src/*.h"]), hdrs
# glob(["include/ddstore/*.h"], exclude the version header))
function(dds_sources_transport prefix pkg header)
  _dds_glob(srcs ${pkg} "src/*.c" "src/*.h")
  _dds_glob(hdrs ${pkg} "include/ddstore/*.h")
  list(REMOVE_ITEM hdrs "${DDS_SOURCE_ROOT}/${pkg}/include/ddstore/${header}")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/${pkg}/VERSION" PARENT_SCOPE)
endfunction()

# //python:pyddstore/_core.so  (BUILD: srcs glob(["pyddstore/csrc/*.c",
# "pyddstore/csrc/*.h"]))
function(dds_sources_pycore prefix)
  _dds_glob(srcs python "pyddstore/csrc/*.c" "pyddstore/csrc/*.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
endfunction()

# //libddstore:ddstore  (BUILD: srcs glob(["src/*.c", "src/*.h"]), hdrs
# glob(["include/ddstore/*.h"], exclude hub_version.h)); libddstore.so is
# it with every library below it (//libddstore:lib/libddstore.so).
function(dds_sources_hub prefix)
  _dds_glob(srcs libddstore "src/*.c" "src/*.h")
  _dds_glob(hdrs libddstore "include/ddstore/*.h")
  list(REMOVE_ITEM hdrs "${DDS_SOURCE_ROOT}/libddstore/include/ddstore/hub_version.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_HDRS "${hdrs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/libddstore/VERSION" PARENT_SCOPE)
endfunction()

# //ddstore-torch:_ddstore_torch.so  (BUILD: srcs glob(["csrc/*.cpp",
# "csrc/*.h"]))
function(dds_sources_torch prefix)
  _dds_glob(srcs ddstore-torch "csrc/*.cpp" "csrc/*.h")
  set(${prefix}_SRCS "${srcs}" PARENT_SCOPE)
  set(${prefix}_VERSION_FILE "${DDS_SOURCE_ROOT}/ddstore-torch/VERSION" PARENT_SCOPE)
endfunction()

# dds_module_sources(<out> <core|torch> <gpu backend> <mpi ON/OFF> <ofi ON/OFF>):
# every source file (compiled files, headers, VERSION files) that goes into
# one module, as Bazel's deps() of that module would list them.
function(dds_module_sources out target backend mpi ofi)
  # libddstore.so, which both modules link (and the public headers of every
  # library in it, which both compile against).
  set(files "")
  dds_sources_core(c)
  dds_sources_gpu(g "${backend}")
  dds_sources_hub(h)
  list(APPEND files ${c_SRCS} ${c_HDRS} ${c_VERSION_FILE} ${g_SRCS} ${g_HDRS} ${g_VERSION_FILE}
       ${h_SRCS} ${h_HDRS} ${h_VERSION_FILE})
  if(mpi)
    dds_sources_mpi(m)
    list(APPEND files ${m_SRCS} ${m_HDRS} ${m_VERSION_FILE})
  endif()
  if(ofi)
    dds_sources_ofi(o)
    dds_sources_ofi_transport(ot)
    list(APPEND files ${o_SRCS} ${o_HDRS} ${o_VERSION_FILE} ${ot_SRCS} ${ot_HDRS})
  endif()
  set(tp ${DDS_TRANSPORT_PACKAGES})
  while(tp)
    list(GET tp 0 pkg)
    list(GET tp 2 header)
    list(REMOVE_AT tp 0 1 2 3)
    dds_sources_transport(x ${pkg} ${header})
    list(APPEND files ${x_SRCS} ${x_HDRS} ${x_VERSION_FILE})
  endwhile()
  if(target STREQUAL "core")
    dds_sources_pycore(p)
    list(APPEND files ${p_SRCS} "${DDS_SOURCE_ROOT}/python/VERSION")
  elseif(target STREQUAL "torch")
    dds_sources_torch(t)
    list(APPEND files ${t_SRCS} ${t_VERSION_FILE})
  else()
    message(FATAL_ERROR "ddstore: TARGET=${target}: expected core or torch")
  endif()
  list(REMOVE_DUPLICATES files)
  list(SORT files)
  set(${out} "${files}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DEFINED TARGET)
    message(FATAL_ERROR "usage: cmake -DTARGET=core|torch [-DGPU=none|cuda|rocm|all] [-DMPI=ON|OFF] [-DOFI=ON|OFF] -P ${CMAKE_CURRENT_LIST_FILE}")
  endif()
  if(NOT DEFINED GPU)
    set(GPU none)
  endif()
  if(NOT DEFINED MPI)
    set(MPI ON)
  endif()
  if(NOT DEFINED OFI)
    set(OFI ON)
  endif()
  dds_module_sources(files "${TARGET}" "${GPU}" "${MPI}" "${OFI}")
  foreach(f IN LISTS files)
    file(RELATIVE_PATH rel "${DDS_SOURCE_ROOT}" "${f}")
    # message() goes to stderr; execute_process(... OUTPUT_VARIABLE) users
    # and ci/check_sources.py read stderr.
    message("${rel}")
  endforeach()
endif()
