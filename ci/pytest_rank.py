#!/usr/bin/env python3
"""pytest for one MPI rank: writes its JUnit XML to $DDSTORE_JUNIT_DIR/rank<R>.xml.

Used by ci/run_tests.py under tools/ddrun so every rank's results are
collected (a test that fails on any rank fails).
"""
import os
import sys

import pytest

rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK",
                                     "SLURM_PROCID") if v in os.environ), "0")
args = sys.argv[1:]
d = os.environ.get("DDSTORE_JUNIT_DIR")
if d:
    args = [f"--junitxml={os.path.join(d, f'rank{rank}.xml')}"] + args
if rank != "0":
    args = ["-p", "no:terminal"] + args if "-q" not in args else args
sys.exit(pytest.main(args))
