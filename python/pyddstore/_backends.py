"""The hub's backend table (ddstore/backends.h), looked up by row instead of
branching on method numbers: rows(), row(method) (ValueError listing the
methods when none has it), default_method(have_mpi_comm)."""
from ._core import backend as row, backends as rows, default_method  # noqa: F401

__all__ = ["rows", "row", "default_method"]
