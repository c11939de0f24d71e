"""Every external repository of the ddstore build, all of them local.

WORKSPACE loads this file and calls ddstore_repositories(); nothing here
downloads (CI builds with --config=ci, which forbids downloads).
"""

load("//third_party/bazel_offline:bazel_offline.bzl", "offline_coverage_tools", "offline_rules_cc", "offline_rules_java")
load("//third_party/cuda:cuda_configure.bzl", "cuda_configure")
load("//third_party/libfabric:libfabric_configure.bzl", "libfabric_configure")
load("//third_party/mpi:mpi_configure.bzl", "mpi_configure")
load("//third_party/python:python_configure.bzl", "python_configure")
load("//third_party/rocm:rocm_configure.bzl", "rocm_configure")
load("//third_party/torch:torch_configure.bzl", "torch_configure")

def ddstore_repositories():
    # Bazel's own remote repositories, served locally (bazel_offline.bzl).
    offline_rules_cc(name = "rules_cc")
    offline_rules_java(name = "rules_java")
    offline_coverage_tools(name = "remote_coverage_tools")

    # System dependencies: each one found, or an explicit "missing" state.
    python_configure(name = "local_config_python")
    torch_configure(name = "local_config_torch")
    mpi_configure(name = "local_config_mpi")
    libfabric_configure(name = "local_config_libfabric")
    cuda_configure(name = "local_config_cuda")
    rocm_configure(name = "local_config_rocm")

    # py_binary/py_test run the project's interpreter, not whatever
    # `python3` the autodetecting toolchain finds on PATH.
    native.register_toolchains("@local_config_python//:py_toolchain")
