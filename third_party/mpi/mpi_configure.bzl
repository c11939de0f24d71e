"""mpi_configure: the MPI library, through its compiler wrapper.

  DDSTORE_MPI=0                  build without MPI (HAVE_MPI = False)
  DDSTORE_MPI_IMPL=openmpi       (default) `mpicc -showme:compile` / `-showme:link`
  DDSTORE_MPI_IMPL=mpich         `mpicc -show` (MPICH, Cray MPICH, Intel MPI)
  MPICC=/path/to/mpicc           the wrapper to ask (else mpicc.<impl>, mpicc)
  MPIRUN=/path/to/mpirun         the launcher recorded for tests (else
                                 mpirun.<impl>, mpiexec.<impl>, mpirun, mpiexec)

Generates @local_config_mpi with
  :mpi        cc_library: MPI headers (mirrored), link flags with rpath, and
              OMPI_SKIP_MPICXX=1 / MPICH_SKIP_MPICXX=1; empty when missing
  defs.bzl    HAVE_MPI, MPI_IMPL, MPICC, MPIRUN, MPI_REASON
"""

load(
    "//third_party:repo_utils.bzl",
    "env_disabled",
    "env_get",
    "link_flags",
    "link_include_dirs",
    "run",
    "split_flags",
    "starlark_list",
    "which",
    "write_defs",
)

def _empty(rctx, impl, reason):
    write_defs(rctx, "MPI", False, reason, {"MPI_IMPL": impl, "MPICC": "", "MPIRUN": ""})
    rctx.template("BUILD", Label("//third_party/mpi:BUILD.tpl"), {
        "%{REASON}": reason,
        "%{HDRS}": "[]",
        "%{INCLUDES}": "[]",
        "%{DEFINES}": "[]",
        "%{LINKOPTS}": "[]",
    })

def _impl(rctx):
    impl = env_get(rctx, "DDSTORE_MPI_IMPL", "openmpi").lower()
    if env_disabled(rctx, "DDSTORE_MPI"):
        _empty(rctx, impl, "disabled by DDSTORE_MPI=0")
        return
    if impl not in ["openmpi", "mpich"]:
        fail("DDSTORE_MPI_IMPL=%s: expected openmpi or mpich" % impl)
    mpicc = which(rctx, [env_get(rctx, "MPICC"), "mpicc." + impl, "mpicc"])
    if mpicc == None:
        _empty(rctx, impl, "no MPI compiler wrapper (mpicc.%s or mpicc) on PATH; set MPICC or DDSTORE_MPI=0" % impl)
        return
    if impl == "openmpi":
        ok1, comp, err1 = run(rctx, [mpicc, "-showme:compile"])
        ok2, link, err2 = run(rctx, [mpicc, "-showme:link"])
        if not (ok1 and ok2):
            _empty(rctx, impl, "%s is not an Open MPI wrapper (-showme failed: %s); try DDSTORE_MPI_IMPL=mpich" % (mpicc, (err1 + err2).strip()))
            return
        text = comp + " " + link
        defines = ["OMPI_SKIP_MPICXX=1"]
    else:
        ok, text, err = run(rctx, [mpicc, "-show"])
        if not ok:
            _empty(rctx, impl, "%s -show failed: %s" % (mpicc, err.strip()))
            return
        defines = ["MPICH_SKIP_MPICXX=1"]
    incs, libdirs, libs, other = split_flags(text)
    if not libs:
        _empty(rctx, impl, "%s reported no MPI library in: %s" % (mpicc, text.strip()))
        return
    mirrored = link_include_dirs(rctx, incs)
    mpirun = which(rctx, [
        env_get(rctx, "MPIRUN"),
        "mpirun." + impl,
        "mpiexec." + impl,
        "mpirun",
        "mpiexec",
    ])
    write_defs(rctx, "MPI", True, "%s via %s" % (impl, mpicc), {
        "MPI_IMPL": impl,
        "MPICC": str(mpicc),
        "MPIRUN": str(mpirun) if mpirun else "",
    })
    rctx.template("BUILD", Label("//third_party/mpi:BUILD.tpl"), {
        "%{REASON}": "%s via %s" % (impl, mpicc),
        "%{HDRS}": "glob([%s])" % ", ".join(['"%s/**"' % m for m in mirrored]) if mirrored else "[]",
        "%{INCLUDES}": starlark_list(mirrored),
        "%{DEFINES}": starlark_list(defines),
        "%{LINKOPTS}": starlark_list(link_flags(libdirs, libs, other)),
    })

mpi_configure = repository_rule(
    implementation = _impl,
    environ = ["DDSTORE_MPI", "DDSTORE_MPI_IMPL", "MPICC", "MPIRUN", "PATH"],
    configure = True,
    doc = "Finds MPI (Open MPI or MPICH) through its compiler wrapper.",
)
