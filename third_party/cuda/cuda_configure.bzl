"""cuda_configure: the CUDA runtime (headers + libcudart) for --config=cuda.

  DDSTORE_CUDA=0                       never use CUDA (HAVE_CUDA = False)
  CUDA_PATH / CUDA_HOME / CUDA_ROOT    the toolkit root; else /usr/local/cuda,
                                       else the root of `nvcc` on PATH, else /usr
                                       (Debian's nvidia-cuda-toolkit)

ddstore-gpu's CUDA backend uses the runtime API only, so it is plain C
compiled by the host compiler against these headers; nvcc is recorded but
not needed.

Generates @local_config_cuda with
  :cuda_headers  cuda_runtime_api.h & co (mirrored)
  :cudart        headers + -lcudart with an rpath to the toolkit's lib dir;
                 when CUDA is missing, building it fails with the reason
  defs.bzl       HAVE_CUDA, CUDA_ROOT, CUDA_VERSION, NVCC, CUDA_REASON
"""

load(
    "//third_party:repo_utils.bzl",
    "env_disabled",
    "env_get",
    "error_rule_text",
    "link_flags",
    "link_include_dirs",
    "run",
    "starlark_list",
    "which",
    "write_defs",
)

def _empty(rctx, reason):
    write_defs(rctx, "CUDA", False, reason, {"CUDA_ROOT": "", "CUDA_VERSION": "", "NVCC": ""})
    rctx.template("BUILD", Label("//third_party/cuda:BUILD.tpl"), {
        "%{REASON}": reason,
        "%{HDRS}": "[]",
        "%{INCLUDES}": "[]",
        "%{LINKOPTS}": "[]",
        "%{ERROR_SRCS}": '[":cuda_missing"]',
        "%{ERROR_RULE}": error_rule_text("cuda_missing", "CUDA (--config=cuda)", reason),
    })

def _libdir(rctx, root):
    for sub in ["lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"]:
        if rctx.path("%s/%s/libcudart.so" % (root, sub)).exists:
            return "%s/%s" % (root, sub)
    return None

def _impl(rctx):
    if env_disabled(rctx, "DDSTORE_CUDA"):
        _empty(rctx, "disabled by DDSTORE_CUDA=0")
        return
    roots = [env_get(rctx, "CUDA_PATH"), env_get(rctx, "CUDA_HOME"), env_get(rctx, "CUDA_ROOT"), "/usr/local/cuda"]
    nvcc = which(rctx, ["nvcc"])
    if nvcc != None:
        roots.append(str(nvcc.dirname.dirname))
    roots.append("/usr")
    root, libdir = None, None
    tried = []
    for r in roots:
        if r == None:
            continue
        tried.append(r)
        if rctx.path(r + "/include/cuda_runtime_api.h").exists:
            libdir = _libdir(rctx, r)
            if libdir != None:
                root = r
                break
    if root == None:
        _empty(rctx, "no CUDA toolkit (cuda_runtime_api.h + libcudart.so) under %s; set CUDA_PATH" % ", ".join(tried))
        return
    nvcc = which(rctx, [root + "/bin/nvcc"]) or nvcc
    version = ""
    if nvcc != None:
        ok, out, _ = run(rctx, [nvcc, "--version"])
        if ok and "release " in out:
            version = out.split("release ")[1].split(",")[0].strip()
    mirrored = link_include_dirs(rctx, [root + "/include"])
    write_defs(rctx, "CUDA", True, "CUDA %s at %s" % (version, root), {
        "CUDA_ROOT": root,
        "CUDA_VERSION": version,
        "NVCC": str(nvcc) if nvcc else "",
    })
    rctx.template("BUILD", Label("//third_party/cuda:BUILD.tpl"), {
        "%{REASON}": "CUDA %s at %s" % (version, root),
        "%{HDRS}": "glob([%s])" % ", ".join(['"%s/**"' % m for m in mirrored]) if mirrored else "[]",
        "%{INCLUDES}": starlark_list(mirrored),
        "%{LINKOPTS}": starlark_list(link_flags([libdir], ["-lcudart"])),
        "%{ERROR_SRCS}": "[]",
        "%{ERROR_RULE}": "",
    })

cuda_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_CUDA", "CUDA_PATH", "CUDA_HOME", "CUDA_ROOT", "PATH"],
    configure = True,
    doc = "Finds the CUDA runtime for --config=cuda.",
)
