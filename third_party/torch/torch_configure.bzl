"""torch_configure: libtorch headers and libraries from the project's Python.

Runs the interpreter found by python_configure (DDSTORE_PYTHON,
<workspace>/.venv/bin/python, python3) on probe.py (shared with the CMake
build), which asks torch itself: torch.utils.cpp_extension.include_paths() /
library_paths(), torch._C._GLIBCXX_USE_CXX11_ABI and the C++ standard
cpp_extension compiles with.  DDSTORE_TORCH=0 disables it.

Generates @local_config_torch with
  :torch        headers + -ltorch -ltorch_cpu -lc10 -ltorch_python, rpath to
                torch's lib dir, -D_GLIBCXX_USE_CXX11_ABI=<torch's>
  :torch_cuda   -lc10_cuda -ltorch_cuda when torch is a CUDA build (else empty)
  :torch_hip    -lc10_hip -ltorch_hip when torch is a ROCm build (else empty)
  defs.bzl      HAVE_TORCH, TORCH_VERSION, TORCH_CXX11_ABI, TORCH_CUDA,
                TORCH_HIP, TORCH_CXX_STD (17, 20, ...), TORCH_REASON
"""

load("//third_party:repo_utils.bzl", "env_disabled", "link_flags", "run", "starlark_list", "write_defs")
load("//third_party/python:python_configure.bzl", "find_python")


def _libs_present(rctx, libdirs, names):
    out = []
    for n in names:
        for d in libdirs:
            if rctx.path(d + "/lib" + n + ".so").exists:
                out.append("-l" + n)
                break
    return out

def _empty(rctx, reason):
    write_defs(rctx, "TORCH", False, reason, {
        "TORCH_VERSION": "",
        "TORCH_CXX11_ABI": 1,
        "TORCH_CUDA": "",
        "TORCH_HIP": "",
        "TORCH_CXX_STD": 17,
    })
    rctx.template("BUILD", Label("//third_party/torch:BUILD.tpl"), {
        "%{REASON}": reason,
        "%{HDRS}": "[]",
        "%{INCLUDES}": "[]",
        "%{DEFINES}": "[]",
        "%{LINKOPTS}": "[]",
        "%{CUDA_LINKOPTS}": "[]",
        "%{HIP_LINKOPTS}": "[]",
    })

def _impl(rctx):
    if env_disabled(rctx, "DDSTORE_TORCH"):
        _empty(rctx, "disabled by DDSTORE_TORCH=0")
        return
    py = find_python(rctx)
    if py == None:
        _empty(rctx, "no Python interpreter (set DDSTORE_PYTHON)")
        return
    probe = rctx.path(Label("//third_party/torch:probe.py"))
    ok, out, err = run(rctx, [py, str(probe)], timeout = 300)
    if not ok:
        last = err.strip().split("\n")[-1] if err.strip() else "no output"
        _empty(rctx, "%s cannot import torch: %s" % (py, last))
        return
    kv = {}
    for line in out.split("\n"):
        if line.startswith("DDS:") and "=" in line:
            k, v = line[4:].split("=", 1)
            kv[k] = v.strip()
    incs = [d for d in kv.get("include", "").split("|") if d]
    libdirs = [d for d in kv.get("lib", "").split("|") if d]

    # Mirror the include dirs; nested ones (torch/csrc/api/include) become
    # sub-paths of the first.
    tops, includes = [], []
    for d in incs:
        d = d.rstrip("/")
        parent = None
        for i, t in enumerate(tops):
            if d.startswith(t + "/"):
                parent = (i, d[len(t) + 1:])
        if parent != None:
            includes.append("include_%d/%s" % (parent[0], parent[1]))
        elif rctx.path(d).exists:
            rctx.symlink(d, "include_%d" % len(tops))
            includes.append("include_%d" % len(tops))
            tops.append(d)
    if not tops:
        _empty(rctx, "torch reports no include paths (a torch without C++ headers?)")
        return

    core = _libs_present(rctx, libdirs, ["torch", "torch_cpu", "c10", "torch_python"])
    if len(core) < 4:
        _empty(rctx, "torch's lib dir %s lacks one of libtorch, libtorch_cpu, libc10, libtorch_python" % libdirs)
        return
    cuda = _libs_present(rctx, libdirs, ["c10_cuda", "torch_cuda"]) if kv.get("cuda") else []
    hip = _libs_present(rctx, libdirs, ["c10_hip", "torch_hip"]) if kv.get("hip") else []
    abi = int(kv.get("abi", "1"))
    version = kv.get("version", "")
    write_defs(rctx, "TORCH", True, "torch %s from %s (C++11 ABI %d)" % (version, py, abi), {
        "TORCH_VERSION": version,
        "TORCH_CXX11_ABI": abi,
        "TORCH_CUDA": kv.get("cuda", ""),
        "TORCH_HIP": kv.get("hip", ""),
        "TORCH_CXX_STD": int(kv.get("cxxstd", "17")),
    })
    rctx.template("BUILD", Label("//third_party/torch:BUILD.tpl"), {
        "%{REASON}": "torch " + version,
        "%{HDRS}": "glob([%s])" % ", ".join(['"%s/**"' % ("include_%d" % i) for i in range(len(tops))]),
        "%{INCLUDES}": starlark_list(includes),
        "%{DEFINES}": starlark_list(["_GLIBCXX_USE_CXX11_ABI=%d" % abi]),
        "%{LINKOPTS}": starlark_list(link_flags(libdirs, core)),
        "%{CUDA_LINKOPTS}": starlark_list(link_flags(libdirs, cuda) if cuda else []),
        "%{HIP_LINKOPTS}": starlark_list(link_flags(libdirs, hip) if hip else []),
    })

torch_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_PYTHON", "DDSTORE_TORCH", "PATH"],
    configure = True,
    doc = "Finds libtorch through the project's Python interpreter.",
)
