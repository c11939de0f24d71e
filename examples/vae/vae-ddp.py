"""A VAE trained with DDP on Fashion-MNIST served from a distributed store.

    tools/ddrun -n 4 -- .venv/bin/python examples/vae/vae-ddp.py            # ./ddstore demo
    DDSTORE_METHOD=1 DDSTORE_FABRIC=cxi srun -n 4 python examples/vae/vae-ddp.py --num-workers=1
    DDSTORE_METHOD=1 DDSTORE_FABRIC=cxi srun -n 4 --gpus-per-task=1 \\
        python examples/vae/vae-ddp.py --num-workers=1 --gpu-dest --gpu-source
    DDSTORE_FABRIC=cxi srun -n 4 --gpus-per-task=1 python examples/vae/vae-ddp.py --comm=torch

Each rank loads only its share of the training set into a DistDataset (the
images as float32 rows, the labels as int64); a DistributedSampler (with
set_epoch) draws each rank's samples from the whole set and a
ThreadDataLoader (or DataLoader) reads them from whichever rank holds them.
Each epoch prints the loss and the loader's epoch report (ThreadDataLoader's,
or report.Timed's for torch's DataLoader: wait vs compute, the slowest rank,
the read split); at the end rank 0 writes a PNG (loss curve and
reconstructions), the last epoch's timeline (vae-ddp-timeline.png: where each
batch's time went) and the read profile.

Options: --num-workers N (threads, or forked processes with --loader torch,
which need method 1/2 and DDSTORE_FORK_WORKERS=1), --loader torch|thread,
--gpu-dest / --gpu-source (DistDataset device= / add_device=), --replicate R,
--image-scale S, --comm torch (the DDP group instead of MPI), --epochs,
--batch-size, --method; --help lists the rest.
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402  (import torch before MPI starts)

import vae_common as vc  # noqa: E402


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    vc.add_common_args(ap)
    return ap.parse_args(argv)


def main(argv=None):
    args = parse(argv)
    torch.set_num_threads(args.threads)
    from pyddstore.torch import DistDataset

    d = vc.Dist(args.comm)
    try:
        return _run(args, d, DistDataset)
    finally:
        d.close()


def _run(args, d, DistDataset):
    device = d.device()
    if (args.gpu_dest or args.gpu_source) and device.type != "cuda":
        raise SystemExit("--gpu-dest / --gpu-source need a GPU (torch.cuda.is_available() "
                         "is False)")
    out_dir = args.out or vc.default_out()
    log = print if d.rank == 0 else (lambda *a, **k: None)

    src = vc.FashionMNIST(args.data, "train", args.replicate, args.image_scale, args.limit)
    side = 28 * args.image_scale
    log(f"vae-ddp: {d.size} ranks, {len(src)} samples of {side}x{side} float32 "
        f"({side * side * 4} B rows), model {args.model}, comm {d.kind}, "
        f"device {device.type}", flush=True)

    t0 = time.perf_counter()
    trainset = DistDataset(src, vc.TRAIN_NAME, comm=d.ddstore_comm(),
                           device=device if args.gpu_dest else None,
                           add_device=device if args.gpu_source else None,
                           method=args.method, handshake_dir=args.handshake_dir)
    load_s = time.perf_counter() - t0
    log(f"loaded: {len(trainset)} samples, rank 0 holds [{trainset.lo}, {trainset.hi}), "
        f"method {trainset.method}, {load_s:.2f} s", flush=True)

    sampler = torch.utils.data.distributed.DistributedSampler(
        trainset, num_replicas=d.size, rank=d.rank, shuffle=True, seed=args.seed)
    loader, kind = vc.build_loader(args, trainset, sampler, device)
    log(f"loader: {type(getattr(loader, 'loader', loader)).__name__}, {args.num_workers} workers, batch "
        f"{args.batch_size} per rank, {len(loader)} batches per epoch", flush=True)

    model, history = vc.train(args, d, trainset, loader, sampler, device, log)

    prof = vc.profile_summary(trainset, d)
    result = {"ranks": d.size, "method": trainset.method, "loader": kind,
              "num_workers": args.num_workers, "load_s": load_s, "history": history,
              "profile": prof, "samples": len(trainset), "row_bytes": side * side * 4}
    if d.rank == 0:
        log(vc.format_profile(prof), flush=True)
        vc.write_json(os.path.join(out_dir, "vae-ddp.json"), result)
        if not args.no_plot:
            x = torch.stack([trainset[i][0].cpu() for i in range(8)])
            png = os.path.join(out_dir, "vae-ddp.png")
            vc.save_png(png, history, model, x, device,
                        f"VAE on Fashion-MNIST, {d.size} ranks, ddstore method "
                        f"{trainset.method}, {kind} loader")
            log(f"wrote {png}", flush=True)
            result["png"] = png
            from pyddstore.torch.report import plot_timeline
            tl = plot_timeline([h["report"] for h in history],
                               os.path.join(out_dir, "vae-ddp-timeline.png"))
            if tl:
                log(f"wrote {tl}", flush=True)
                result["timeline_png"] = tl
    if hasattr(loader, "close"):
        loader.close()
    trainset.free()
    return result


if __name__ == "__main__":
    main()
