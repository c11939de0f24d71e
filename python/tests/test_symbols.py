"""The extension modules export their module init function and nothing of
ours (issue 13): every library is compiled with -fvisibility=hidden
(bazel/ddstore.bzl, CMakeLists.txt), so no dds_* / ddofi_* / ddmpi_* /
ddgpu_* symbol, nor the adapter's functions, can interpose on (or be
interposed by) another library loaded in the same process - libfabric's own
ofi_* names in particular."""
import glob
import os
import re
import shutil
import subprocess

import pytest

import pyddstore

PKG = os.path.dirname(os.path.abspath(pyddstore.__file__))
# what the linker defines in every shared object
LINKER = {"__bss_start", "_edata", "_end", "_init", "_fini"}
OURS = re.compile(r"(^|[^A-Za-z])(dds|ddofi|ddmpi|ddgpu|ddstore|pydds|ofi|dd_torch)_", re.I)


def _exports(so):
    if shutil.which("nm") is None:
        pytest.skip("nm (binutils) is not installed")
    out = subprocess.run(["nm", "-D", "--defined-only", "-C", so], check=True,
                         capture_output=True, text=True).stdout
    return [line.split(None, 2)[-1] for line in out.splitlines() if line.strip()]


def _module(name):
    found = sorted(glob.glob(os.path.join(PKG, name + "*.so")))
    if not found:
        pytest.skip(f"{name} is not built in {PKG}")
    return found[0]


def test_libddstore_exports_only_the_public_api():
    """libddstore.so (every C library, linked by both modules) exports the
    functions the public headers mark (DDS_API & co.): our prefixes only, and
    none of the adapter's internals (ofi_* is libfabric's own prefix)."""
    lib = os.path.join(PKG, "libddstore.so")
    if not os.path.isfile(lib):
        pytest.skip(f"libddstore.so is not built in {PKG}")
    syms = set(_exports(lib)) - LINKER
    for need in ("dds_store_get_batch", "dds_last_error", "ddstore_open",
                 "ddstore_handle_enter", "ddgpu_pointer_kind"):
        assert need in syms, need
    stray = sorted(s for s in syms
                   if not re.match(r"(dds|ddstore|ddgpu|ddmpi|ddofi)_", s))
    assert not stray, stray
    assert not [s for s in syms if s.startswith("ofi_")]


def test_core_exports_only_its_init():
    syms = set(_exports(_module("_core"))) - LINKER
    assert syms == {"PyInit__core"}, sorted(syms)


def test_torch_extension_exports_nothing_of_ours():
    # PyInit__ddstore_torch and what the C++ standard library's headers keep
    # visible (template instantiations and type info of namespace std, which
    # has default visibility); nothing of namespace ddstore_torch, no C name
    syms = set(_exports(_module("_ddstore_torch"))) - LINKER
    assert "PyInit__ddstore_torch" in syms
    ours = sorted(s for s in syms - {"PyInit__ddstore_torch"}
                  if "ddstore" in s or OURS.search(s) or " " not in s and "::" not in s)
    assert not ours, ours
