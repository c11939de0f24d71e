"""Console commands of the pip package (pyproject.toml [project.scripts]).

    ddstore-info        pyddstore.info        (build, settings, environment)
    ddstore-handshake   pyddstore.handshake   (method-2 records)
    ddrun               tools/ddrun           (one-node multi-rank launcher)

ddrun is a bash script; the wheel carries a copy of it (pyddstore/_bin/ddrun,
installed by CMakeLists.txt) and this module runs it.  In a checkout the
tree's tools/ddrun is used.
"""
import os
import sys


def _ddrun_script():
    here = os.path.dirname(os.path.abspath(__file__))
    for p in (os.path.join(here, "_bin", "ddrun"),
              os.path.join(os.path.dirname(os.path.dirname(here)), "tools", "ddrun")):
        if os.path.isfile(p):
            return p
    return None


def ddrun():
    script = _ddrun_script()
    if script is None:
        print("ddrun: this installation of pyddstore has no copy of tools/ddrun "
              "(pyddstore/_bin/ddrun)", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv("/bin/bash", ["ddrun", script] + sys.argv[1:])
    return 127  # not reached
