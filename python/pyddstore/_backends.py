"""The hub's backend table (libddstore/include/ddstore/backends.h) for the
Python glue: what a method needs and can do, looked up by its row instead of
branching on method numbers (pyddstore._core.backends())."""
import functools

__all__ = ["rows", "row", "default_method"]


@functools.lru_cache(maxsize=None)
def _table():
    from pyddstore import _core
    return {b["method"]: b for b in _core.backends()}


def rows():
    """Every row, in method order (dicts: method, name, library, help, built,
    why_not_built, needs_mpi_comm, needs_handshake, thread_readers,
    fork_needs_env, one_process, test_only)."""
    return list(_table().values())


def row(method):
    """The row of `method`; ValueError listing the methods when none has it."""
    r = _table().get(method) if isinstance(method, int) else None
    if r is None:
        names = ", ".join(f"{b['method']} ({b['help']})" for b in rows())
        raise ValueError(f"method must be one of {names}, got {method!r}")
    return r


def default_method(have_mpi_comm):
    """The method used when neither method= nor DDSTORE_METHOD says one."""
    from pyddstore import _core
    return _core.default_method(bool(have_mpi_comm))
