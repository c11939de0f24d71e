"""The settings view of the Python layer, under its old name: the module is
pyddstore._env (torch-free, so that PyDDStore's snapshots read settings the
same way); ``pyddstore.torch.env`` is that module itself."""
import sys

from pyddstore import _env

sys.modules[__name__] = _env
