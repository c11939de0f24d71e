"""pytest fixtures for the pyddstore tests.

Run at any rank count:  tools/ddrun -n N .venv/bin/python -m pytest -q python/tests
Every rank runs the same tests in the same order; collective calls inside a
test are made by every rank.
"""
import os
import sys

import pytest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:  # the tree's package (pyddstore.pth, PYTHONPATH), else python/ here
    import pyddstore  # noqa: E402
except ImportError:
    sys.path.insert(0, os.path.join(TOP, "python"))
    import pyddstore  # noqa: E402

# where pyddstore was imported from (subprocess tests use the same one)
PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(pyddstore.__file__)))


@pytest.fixture
def store():
    """A store over MPI_COMM_WORLD, method 0, freed after the test."""
    if not pyddstore.HAVE_MPI:
        pytest.skip("method 0 needs MPI and this build has none (HAVE_MPI False)")
    s = pyddstore.PyDDStore(None, method=0)
    yield s
    s.free()


@pytest.fixture(scope="session")
def top():
    """The directory to put on sys.path to import this pyddstore."""
    return PKG_PARENT
