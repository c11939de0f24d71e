"""The extra job of the method-2 split: DDP training of the VAE on the data
the core job (vae_core_server.py) published, read with DistDatasetReader.

    srun --network=job_vni -n 4 python examples/vae/vae_extra_train.py --handshake-dir $HS

Same options as vae-ddp.py (--num-workers, --loader, --gpu-dest, --epochs, ...).
The fields come from the core job's {name}.meta.json; at the end rank 0
writes {handshake_dir}/{name}.done so the core job stops serving.
"""
import argparse
import gc
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
    ap.add_argument("--n-core", type=int, default=None,
                    help="ranks of the core job (default: from the core's meta.json)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from pyddstore.torch import env   # --handshake-dir, else DDSTORE_HANDSHAKE_DIR
    hs = env.handshake_dir(args.handshake_dir)
    if not hs:
        raise SystemExit("vae_extra_train: --handshake-dir (or DDSTORE_HANDSHAKE_DIR) is needed")
    from pyddstore.torch import DistDatasetReader
    d = vc.Dist(args.comm)
    try:
        device = d.device()
        log = print if d.rank == 0 else (lambda *a, **k: None)
        t0 = time.perf_counter()
        trainset = DistDatasetReader(vc.TRAIN_NAME, handshake_dir=hs, n_core=args.n_core,
                                     device=device if args.gpu_dest else None)
        log(f"extra: {d.size} ranks joined '{vc.TRAIN_NAME}' ({len(trainset)} samples from "
            f"{trainset.n_core} core ranks) in {time.perf_counter() - t0:.1f} s", flush=True)
        sampler = torch.utils.data.distributed.DistributedSampler(
            trainset, num_replicas=d.size, rank=d.rank, shuffle=True, seed=args.seed)
        loader, kind = vc.build_loader(args, trainset, sampler, device)
        model, history = vc.train(args, d, trainset, loader, sampler, device, log, "extra ")
        prof = vc.profile_summary(trainset, d)
        if d.rank == 0:
            log(vc.format_profile(prof), flush=True)
            out = args.out or vc.default_out()
            vc.write_json(os.path.join(out, "vae-extra.json"),
                          {"history": history, "profile": prof, "ranks": d.size})
            if not args.no_plot:
                x = torch.stack([trainset[i][0].cpu() for i in range(8)])
                vc.save_png(os.path.join(out, "vae-extra.png"), history, model, x, device,
                            f"VAE, extra job of {d.size} ranks reading a method-2 core job")
        if hasattr(loader, "close"):
            loader.close()
        trainset.free()
        torch.distributed.barrier()
        # DDP's reducer holds the process group: drop the model (and its
        # reference cycles) now, so that gloo's threads end with the group in
        # d.close(), not during interpreter exit (where one of them, taking
        # the GIL to release a tensor, aborted the process once)
        del model, loader
        gc.collect()
        if d.rank == 0:
            with open(os.path.join(hs, f"{vc.TRAIN_NAME}.done"), "w") as f:
                f.write("done\n")
    finally:
        d.close()


if __name__ == "__main__":
    main()
