"""rocm_configure: the HIP runtime (headers + libamdhip64) for --config=rocm.

  DDSTORE_ROCM=0               never use ROCm (HAVE_ROCM = False)
  ROCM_PATH / HIP_PATH         the ROCm root; else /opt/rocm, else /usr
                               (Debian: libamdhip64-dev + hipcc)

ddstore-gpu's HIP backend uses the runtime API only, so it is plain C
compiled by the host compiler with -D__HIP_PLATFORM_AMD__.

Generates @local_config_rocm with
  :hip_headers  hip/*.h (mirrored unless under /usr/include)
  :amdhip64     headers + -lamdhip64 (+ rpath); when ROCm is missing,
                building it fails with the reason
  defs.bzl      HAVE_ROCM, ROCM_ROOT, HIP_VERSION, HIPCC, ROCM_REASON
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
    write_defs(rctx, "ROCM", False, reason, {"ROCM_ROOT": "", "HIP_VERSION": "", "HIPCC": ""})
    rctx.template("BUILD", Label("//third_party/rocm:BUILD.tpl"), {
        "%{REASON}": reason,
        "%{HDRS}": "[]",
        "%{INCLUDES}": "[]",
        "%{LINKOPTS}": "[]",
        "%{ERROR_SRCS}": '[":rocm_missing"]',
        "%{ERROR_RULE}": error_rule_text("rocm_missing", "ROCm/HIP (--config=rocm)", reason),
    })

def _libdir(rctx, root):
    for sub in ["lib", "lib64", "lib/x86_64-linux-gnu"]:
        if rctx.path("%s/%s/libamdhip64.so" % (root, sub)).exists:
            return "%s/%s" % (root, sub)
    return None

def _impl(rctx):
    if env_disabled(rctx, "DDSTORE_ROCM"):
        _empty(rctx, "disabled by DDSTORE_ROCM=0")
        return
    roots = [env_get(rctx, "ROCM_PATH"), env_get(rctx, "HIP_PATH"), "/opt/rocm", "/usr"]
    root, libdir, tried = None, None, []
    for r in roots:
        if r == None:
            continue
        tried.append(r)
        if rctx.path(r + "/include/hip/hip_runtime_api.h").exists:
            libdir = _libdir(rctx, r)
            if libdir != None:
                root = r
                break
    if root == None:
        _empty(rctx, "no HIP runtime (hip/hip_runtime_api.h + libamdhip64.so) under %s; set ROCM_PATH" % ", ".join(tried))
        return
    hipcc = which(rctx, [root + "/bin/hipcc", "hipcc"])
    version = ""
    hipconfig = which(rctx, [root + "/bin/hipconfig", "hipconfig"])
    if hipconfig != None:
        ok, out, _ = run(rctx, [hipconfig, "--version"])
        if ok:
            version = out.strip().split("\n")[-1]
    mirrored = link_include_dirs(rctx, [root + "/include"])
    write_defs(rctx, "ROCM", True, "HIP %s at %s" % (version, root), {
        "ROCM_ROOT": root,
        "HIP_VERSION": version,
        "HIPCC": str(hipcc) if hipcc else "",
    })
    rctx.template("BUILD", Label("//third_party/rocm:BUILD.tpl"), {
        "%{REASON}": "HIP %s at %s" % (version, root),
        "%{HDRS}": "glob([%s])" % ", ".join(['"%s/**"' % m for m in mirrored]) if mirrored else "[]",
        "%{INCLUDES}": starlark_list(mirrored),
        "%{LINKOPTS}": starlark_list(link_flags([libdir], ["-lamdhip64"])),
        "%{ERROR_SRCS}": "[]",
        "%{ERROR_RULE}": "",
    })

rocm_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_ROCM", "ROCM_PATH", "HIP_PATH", "PATH"],
    configure = True,
    doc = "Finds the HIP runtime for --config=rocm.",
)
