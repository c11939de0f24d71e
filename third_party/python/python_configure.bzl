"""python_configure: the project's Python interpreter, its headers and its
extension-module suffix, and a Python toolchain pinned to it.

Interpreter, in order: $DDSTORE_PYTHON, <workspace>/.venv/bin/python,
python3 on PATH.  Re-run with `bazel sync --configure` (or change
DDSTORE_PYTHON) after replacing the interpreter.

Generates @local_config_python with
  :python_headers   cc_library, Python.h & co (no libpython: extensions
                    resolve the interpreter's symbols at import)
  :numpy_headers    cc_library, numpy's C headers (empty without numpy)
  :py_toolchain     toolchain for py_binary/py_test, registered by
                    third_party/repositories.bzl
  defs.bzl          HAVE_PYTHON, PYTHON_BIN, PYTHON_VERSION, EXT_SUFFIX,
                    HAVE_NUMPY, PYTHON_REASON
"""

load("//third_party:repo_utils.bzl", "env_get", "run", "which", "workspace_root", "write_defs")

_PROBE = """
import sys, sysconfig
print(sys.executable)
print("%d.%d" % sys.version_info[:2])
print(sysconfig.get_paths()["include"])
print(sysconfig.get_config_var("EXT_SUFFIX") or ".so")
try:
    import numpy
    print(numpy.get_include())
except Exception:
    print("")
"""

def find_python(rctx):
    """The interpreter to use (a path, not resolved through symlinks, so a
    virtualenv keeps its site-packages), or None."""
    cands = [env_get(rctx, "DDSTORE_PYTHON")]
    venv = workspace_root(rctx).get_child(".venv").get_child("bin").get_child("python")
    cands.append(str(venv))
    cands.append("python3")
    for c in cands:
        if c == None:
            continue
        p = which(rctx, [c])
        if p != None:
            return p
    return None

def _impl(rctx):
    tpl = Label("//third_party/python:BUILD.tpl")
    py = find_python(rctx)
    info = None
    reason = "no Python interpreter (set DDSTORE_PYTHON, or create .venv)"
    if py != None:
        ok, out, err = run(rctx, [py, "-c", _PROBE])
        if ok:
            info = out.strip("\n").split("\n")
        else:
            reason = "%s failed: %s" % (py, err.strip())
    if info == None or len(info) < 5:
        write_defs(rctx, "PYTHON", False, reason, {
            "PYTHON_BIN": "",
            "PYTHON_VERSION": "",
            "EXT_SUFFIX": ".so",
            "HAVE_NUMPY": False,
        })
        rctx.template("BUILD", tpl, {
            "%{PYTHON_BIN}": "/usr/bin/python3",
            "%{HDRS}": "[]",
            "%{INCLUDES}": "[]",
            "%{NUMPY_HDRS}": "[]",
            "%{NUMPY_INCLUDES}": "[]",
        })
        return
    _exe, version, include, ext_suffix, numpy_inc = info[0], info[1], info[2], info[3], info[4]
    have_headers = rctx.path(include).get_child("Python.h").exists
    if have_headers:
        rctx.symlink(include, "include")
    if numpy_inc != "" and rctx.path(numpy_inc).exists:
        rctx.symlink(numpy_inc, "numpy_include")
    write_defs(
        rctx,
        "PYTHON",
        have_headers,
        "%s (Python %s, headers %s)" % (py, version, include) if have_headers else "%s has no Python.h under %s (install python3-dev)" % (py, include),
        {
            "PYTHON_BIN": str(py),
            "PYTHON_VERSION": version,
            "EXT_SUFFIX": ext_suffix,
            "HAVE_NUMPY": numpy_inc != "",
        },
    )
    rctx.template("BUILD", tpl, {
        "%{PYTHON_BIN}": str(py),
        "%{HDRS}": 'glob(["include/**/*.h"])' if have_headers else "[]",
        "%{INCLUDES}": '["include"]' if have_headers else "[]",
        "%{NUMPY_HDRS}": 'glob(["numpy_include/**/*.h"])' if numpy_inc != "" else "[]",
        "%{NUMPY_INCLUDES}": '["numpy_include"]' if numpy_inc != "" else "[]",
    })

python_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_PYTHON", "PATH"],
    configure = True,
    doc = "Finds the project's Python interpreter and headers.",
)
