"""The core job of the method-2 split: load Fashion-MNIST into a DistDataset
published through handshake_dir, then serve reads until the extra job says it
is done.

    # one Slurm job, two steps sharing a VNI (examples/vae/script/job-vae-split.sh):
    srun --network=job_vni -n 4 python examples/vae/vae_core_server.py --handshake-dir $HS &
    srun --network=job_vni -n 4 python examples/vae/vae_extra_train.py --handshake-dir $HS
    # here:
    DDSTORE_HANDSHAKE_DIR=/tmp/hs tools/ddrun -n 2 -- .venv/bin/python examples/vae/vae_core_server.py &
    DDSTORE_HANDSHAKE_DIR=/tmp/hs tools/ddrun -n 2 -- .venv/bin/python examples/vae/vae_extra_train.py

The core job writes, per variable, a record file plus {name}.meta.json (the
fields) into handshake_dir; the extra job (vae_extra_train.py) reads them with
DistDatasetReader.  Reads are one-sided: the core ranks only sleep (and, with
software providers, ddstore's progress thread serves them).  The core job
stops when {handshake_dir}/{name}.done appears or after --serve-timeout s.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import vae_common as vc  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    vc.add_common_args(ap)
    ap.add_argument("--serve-timeout", type=float, default=3600.0)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from pyddstore.torch import env   # --handshake-dir, else DDSTORE_HANDSHAKE_DIR
    hs = env.handshake_dir(args.handshake_dir)
    if not hs:
        raise SystemExit("vae_core_server: --handshake-dir (or DDSTORE_HANDSHAKE_DIR) is needed")
    os.makedirs(hs, mode=0o700, exist_ok=True)
    from pyddstore.torch import DistDataset
    comm, rank, size, pg = _comm(args)
    src = vc.FashionMNIST(args.data, "train", args.replicate, args.image_scale, args.limit)
    done = os.path.join(hs, f"{vc.TRAIN_NAME}.done")
    if rank == 0 and os.path.exists(done):
        os.unlink(done)
    t0 = time.perf_counter()
    ds = DistDataset(src, vc.TRAIN_NAME, comm=comm, method=2, handshake_dir=hs,
                     add_device=vc.local_device() if args.gpu_source else None)
    if rank == 0:
        print(f"core: {size} ranks published {len(ds)} samples as '{vc.TRAIN_NAME}' in {hs} "
              f"({time.perf_counter() - t0:.1f} s); serving until {done} appears", flush=True)
    t_end = time.monotonic() + args.serve_timeout
    while not os.path.exists(done) and time.monotonic() < t_end:
        time.sleep(0.5)          # one-sided reads need nothing from us
    served = ds.get_profile()
    if rank == 0:
        print(f"core: {'done' if os.path.exists(done) else 'timeout'}; local reads on rank 0: "
              f"{served.get('calls', 0)} calls", flush=True)
    _barrier(comm, pg)
    ds.free()
    if pg:
        torch.distributed.destroy_process_group()


def _comm(args):
    """The core job's communicator: MPI, or torch.distributed (--comm torch)."""
    kind = args.comm or ("torch" if os.environ.get("DDSTORE_MPI", "1") == "0" else "mpi")
    if kind == "mpi":
        from mpi4py import MPI
        c = MPI.COMM_WORLD
        return c, c.Get_rank(), c.Get_size(), False
    d = vc.Dist("torch")
    return torch.distributed.group.WORLD, d.rank, d.size, True


def _barrier(comm, pg):
    if pg:
        torch.distributed.barrier()
    else:
        comm.Barrier()


if __name__ == "__main__":
    main()
