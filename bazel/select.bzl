"""select() helpers: what is compiled in depends on what the configure rules
found (HAVE_* from @local_config_*//:defs.bzl) and on the build flags in
//bazel/config (set by --config=cuda|rocm|nompi|noofi in .bazelrc).

  if_mpi(a, b=[])     a when MPI was found and --config=nompi is not set
  if_ofi(a, b=[])     a when libfabric was found and --config=noofi is not set
  if_cuda(a, b=[])    a under --config=cuda
  if_rocm(a, b=[])    a under --config=rocm
  if_gpu(a, b=[])     a under --config=cuda or --config=rocm
  if_test_hooks(a, b=[])  a unless --config=release (test hooks compiled in)
  if_torch(a, b=[])   a when torch was found
  if_python(a, b=[])  a when Python headers were found

  requires_mpi() / requires_ofi() / requires_torch() / requires_python() /
  requires_unsanitized()
      values for `target_compatible_with`: a target that needs a missing or
      disabled dependency is skipped by `bazel build/test //...` (SKIPPED),
      and asking for it by name fails with "incompatible".
"""

load("@local_config_libfabric//:defs.bzl", "HAVE_LIBFABRIC")
load("@local_config_mpi//:defs.bzl", "HAVE_MPI")
load("@local_config_python//:defs.bzl", "HAVE_PYTHON")
load("@local_config_torch//:defs.bzl", "HAVE_TORCH")


def if_mpi(if_true, if_false = []):
    if not HAVE_MPI:
        return if_false
    return select({
        "//bazel/config:mpi_enabled": if_true,
        "//conditions:default": if_false,
    })

def if_ofi(if_true, if_false = []):
    if not HAVE_LIBFABRIC:
        return if_false
    return select({
        "//bazel/config:ofi_enabled": if_true,
        "//conditions:default": if_false,
    })

def if_cuda(if_true, if_false = []):
    return select({
        "//bazel/config:gpu_cuda": if_true,
        "//conditions:default": if_false,
    })

def if_rocm(if_true, if_false = []):
    return select({
        "//bazel/config:gpu_rocm": if_true,
        "//conditions:default": if_false,
    })

def if_gpu(if_true, if_false = []):
    return select({
        "//bazel/config:gpu_none": if_false,
        "//conditions:default": if_true,
    })

def if_test_hooks(if_true, if_false = []):
    return select({
        "//bazel/config:test_hooks_enabled": if_true,
        "//conditions:default": if_false,
    })

def if_torch(if_true, if_false = []):
    return if_true if HAVE_TORCH else if_false

def if_python(if_true, if_false = []):
    return if_true if HAVE_PYTHON else if_false

def requires_mpi():
    return if_mpi([], ["//bazel/config:no_mpi"])

def requires_ofi():
    return if_ofi([], ["//bazel/config:no_libfabric"])

def requires_torch():
    return if_torch([], ["//bazel/config:no_torch"])

def requires_python():
    return if_python([], ["//bazel/config:no_python_headers"])

def requires_unsanitized():
    """Incompatible under --config=asan|ubsan|tsan (e.g. tests that load an
    instrumented extension into an uninstrumented Python)."""
    return select({
        "//bazel/config:sanitizer_none": [],
        "//conditions:default": ["//bazel/config:sanitized"],
    })
