"""Method 2 (split jobs) with ragged variables: a core job of its own
(tools/ddrun, m2_ragged_core.py) publishes ragged variables; a reader store in
this process joins them and reads every sample (sizes, get_ragged, a thread
reader).  1-rank stage only, like test_method2.py (it starts its own jobs).
"""
import os
import sys

import numpy as np
import pytest

import pyddstore
import test_method2 as m2
import m2_ragged_core as core_job

pytestmark = m2.pytestmark


class RaggedCore(m2.Core):
    """m2.Core running m2_ragged_core.py (MPI builds only)."""

    def __init__(self, top, hs, n, tag=1, fabric="shm"):
        self.hs, self.n, self.tag = hs, n, tag
        env = m2._env(top, {"DDSTORE_FABRIC": fabric})
        args = [sys.executable, os.path.join(m2.HERE, "m2_ragged_core.py"), hs,
                "--tag", str(tag)]
        self.procs = [m2.subprocess.Popen(
            [m2.DDRUN, "-n", str(n), "--timeout", "300", "--"] + args, env=env,
            stdout=m2.subprocess.PIPE, stderr=m2.subprocess.STDOUT, text=True,
            start_new_session=True)]


@pytest.mark.skipif(not pyddstore.HAVE_MPI, reason="the core job runs over MPI")
@pytest.mark.parametrize("n", [1, 2, 4])
def test_reader_joins_ragged_variables(top, tmp_path, n):
    hs = str(tmp_path / "hs")
    core = RaggedCore(top, hs, n, tag=5)
    try:
        s = m2._reader(hs, n)
        s.join("r")
        s.join("u")
        core.wait_ready()
        total = core_job.layout(n)[2]
        lens = [core_job.length(g) for g in range(total)]
        for name, cols in (("r", 3), ("u", 2)):
            full = s.info_full(name)
            assert full["ragged"] is True and s.info(name)[:2] == (total, cols)
            assert full["total_elems"] == sum(lens)
            idx = np.r_[np.arange(total), np.random.default_rng(3).integers(0, total, 50)]
            ref = np.concatenate([core_job.expected(5, name, g) for g in idx])
            np.testing.assert_array_equal(s.sizes(name, idx), [lens[g] for g in idx])
            v, l = s.get_ragged(name, idx)
            assert v.tobytes() == ref.tobytes()
            np.testing.assert_array_equal(l, [lens[g] for g in idx])
            with s.open_reader() as rd:
                out = np.zeros((len(ref) + 1, cols), ref.dtype)
                v2, _ = rd.get_ragged(name, idx, out=out)
                assert v2.tobytes() == ref.tobytes()
            with pytest.raises(ValueError, match="ragged"):
                s.get_batch(name, np.zeros((1, cols), ref.dtype), [0])
        with pytest.raises(ValueError):
            s.update_ragged("r", np.zeros((1, 3), np.float32), 0, 1)
        # the record inspector says ragged
        recs = sorted(m2.glob.glob(os.path.join(hs, "**", "*.ddshs"), recursive=True))
        r = m2.subprocess.run([sys.executable, os.path.join(m2.TOP, "tools", "ddstore-handshake")]
                              + recs, capture_output=True, text=True, env=m2._env(top))
        assert r.returncode == 0, r.stderr
        assert "name r: %d samples" % total in r.stdout, r.stdout
        assert "ragged samples" in r.stdout, r.stdout
        s.free()
        core.stop()
    finally:
        core.kill()
