"""Smoke test of the Bazel-built extension modules: they load in the project's
interpreter (no undefined symbols, the right PyInit_ names, libddstore.so
found through their $ORIGIN RUNPATH) and no C API capsule is left.  Imports from the test's runfiles, so
it checks what Bazel built, not copies in python/pyddstore/.

  ext_import_test.py            pyddstore._core
  ext_import_test.py --torch    pyddstore._core + pyddstore._ddstore_torch
"""

import os
import sys


def main():
    root = os.environ.get("TEST_SRCDIR") or os.environ.get("RUNFILES_DIR")
    if not root:
        print("FAIL: run me with bazel test (TEST_SRCDIR unset)")
        return 1
    pydir = os.path.join(root, os.environ.get("TEST_WORKSPACE", "ddstore"), "python")
    sys.path.insert(0, pydir)

    import pyddstore._core as core

    where = os.path.dirname(os.path.abspath(core.__file__))
    if not where.startswith(pydir):
        print("FAIL: pyddstore._core came from %s, not the runfiles %s" % (core.__file__, pydir))
        return 1
    if hasattr(core, "_C_API"):
        print("FAIL: pyddstore._core still exports a _C_API capsule")
        return 1
    print("ok: pyddstore._core from %s" % core.__file__)

    if "--torch" in sys.argv[1:]:
        import torch  # noqa: F401  (the extension needs libtorch loaded first)
        import pyddstore._ddstore_torch as ext

        print("ok: pyddstore._ddstore_torch from %s (torch %s)" % (ext.__file__, torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
