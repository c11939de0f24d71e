"""Shared parts of the VAE examples: data, model, distributed setup, training.

vae-ddp.py (one job), vae_core_server.py + vae_extra_train.py (method 2 split)
use these.  Nothing here is specific to one launcher: ranks come from MPI
(mpirun / srun with MPI) or from Slurm / torchrun variables (--comm torch).
"""
import json
import itertools
import os
import socket
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))                         # examples/ (mnist_data)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

import mnist_data  # noqa: E402

TRAIN_NAME = "fmnist-train"


# ---------------------------------------------------------------- options ---
def add_common_args(ap):
    ap.add_argument("--data", default=os.environ.get("DDSTORE_VAE_DATA") or None,
                    help="MNIST-format directory (default: $DDSTORE_VAE_DATA, else Debian's "
                         f"dataset-fashion-mnist, {mnist_data.DEFAULT_DIR})")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128, help="per rank")
    ap.add_argument("--num-workers", type=int, default=0,
                    help="loader threads (--loader thread) or forked processes (--loader torch)")
    ap.add_argument("--loader", choices=("torch", "thread"), default=None,
                    help="DataLoader or ThreadDataLoader (default: thread if --num-workers > 0)")
    ap.add_argument("--gpu-dest", action="store_true",
                    help="read batches into GPU memory (DistDataset device=)")
    ap.add_argument("--gpu-source", action="store_true",
                    help="keep each rank's share in GPU memory (DistDataset add_device=)")
    ap.add_argument("--replicate", type=int, default=1, help="repeat the training set R times")
    ap.add_argument("--image-scale", type=int, default=1,
                    help="(28*S)^2 images: S^2 larger rows")
    ap.add_argument("--comm", choices=("mpi", "torch"), default=None,
                    help="torch: the DDP group instead of MPI (default when DDSTORE_MPI=0)")
    ap.add_argument("--method", type=int, default=None,
                    help="ddstore backend 0/1/2 (default: DDSTORE_METHOD, else 0 with MPI)")
    ap.add_argument("--model", choices=("conv", "mlp"), default="conv")
    ap.add_argument("--latent", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0,
                    help="use only the first N training images (0 = all)")
    ap.add_argument("--max-batches", type=int, default=0,
                    help="stop each epoch after N batches (0 = whole epoch)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads per rank")
    ap.add_argument("--out", default=None, help="directory for the PNG and profile JSON "
                                                "(default: out/vae in the repository)")
    ap.add_argument("--handshake-dir", default=None,
                    help="handshake_dir for methods 1/2 without MPI and method 2")
    ap.add_argument("--no-plot", action="store_true")
    return ap


def default_out():
    return os.path.join(os.path.dirname(os.path.dirname(HERE)), "out", "vae")


# ------------------------------------------------------------------- data ---
class FashionMNIST(torch.utils.data.Dataset):
    """Images as float32 (1, 28*S, 28*S) in [0, 1] and the label (int).

    replicate R repeats the set R times; image_scale S upsamples (nearest) so
    rows are S^2 larger — both for throughput studies."""

    def __init__(self, data_dir=None, split="train", replicate=1, image_scale=1, limit=0):
        images, labels = mnist_data.load(data_dir, split)
        if limit:
            images, labels = images[:limit], labels[:limit]
        self.images = images
        self.labels = labels.astype(np.int64)
        self.replicate = max(1, int(replicate))
        self.scale = max(1, int(image_scale))

    def __len__(self):
        return len(self.images) * self.replicate

    def __getitem__(self, i):
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        j = i % len(self.images)
        img = self.images[j]
        if self.scale > 1:
            img = img.repeat(self.scale, axis=0).repeat(self.scale, axis=1)
        x = torch.from_numpy(img.astype(np.float32) / 255.0).unsqueeze(0)
        return x, int(self.labels[j])


class InMemory(torch.utils.data.Dataset):
    """The same samples held locally as two tensors (the reference loader:
    what a user would otherwise do when the data fits)."""

    def __init__(self, src):
        xs, ys = zip(*(src[i] for i in range(len(src))))
        self.x = torch.stack(xs)
        self.y = torch.tensor(ys, dtype=torch.int64)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


# ------------------------------------------------------------------ model ---
class ConvVAE(nn.Module):
    def __init__(self, side=28, latent=16):
        super().__init__()
        if side % 4:
            raise ValueError(f"ConvVAE needs a side divisible by 4, got {side}")
        self.side = side
        s4 = side // 4
        self.enc = nn.Sequential(
            nn.Conv2d(1, 32, 4, 2, 1), nn.ReLU(),
            nn.Conv2d(32, 64, 4, 2, 1), nn.ReLU(), nn.Flatten())
        self.mu = nn.Linear(64 * s4 * s4, latent)
        self.logvar = nn.Linear(64 * s4 * s4, latent)
        self.fc = nn.Linear(latent, 64 * s4 * s4)
        self.dec = nn.Sequential(
            nn.ConvTranspose2d(64, 32, 4, 2, 1), nn.ReLU(),
            nn.ConvTranspose2d(32, 1, 4, 2, 1))
        self.s4 = s4

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        out = self.dec(self.fc(z).view(-1, 64, self.s4, self.s4))
        return out, mu, logvar   # logits


class MLPVAE(nn.Module):
    def __init__(self, side=28, latent=16, hidden=400):
        super().__init__()
        self.side = side
        n = side * side
        self.enc = nn.Sequential(nn.Flatten(), nn.Linear(n, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, n))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z).view(-1, 1, self.side, self.side), mu, logvar


def make_model(kind, side, latent):
    return ConvVAE(side, latent) if kind == "conv" else MLPVAE(side, latent)


def vae_loss(logits, x, mu, logvar):
    """Per-sample mean of BCE (summed over pixels) + KL divergence."""
    bce = F.binary_cross_entropy_with_logits(logits, x, reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return (bce + kld) / x.shape[0]


# ------------------------------------------------------------ distributed ---
class Dist:
    """Ranks, the DDP process group, and the communicator for ddstore."""

    def __init__(self, comm_kind=None):
        if comm_kind is None:
            from pyddstore.torch import env   # DDSTORE_MPI, ddstore's boolean rule
            comm_kind = "mpi" if env.use_mpi() else "torch"
        self.kind = comm_kind
        self.mpi = None
        if comm_kind == "mpi":
            from mpi4py import MPI
            self.mpi = MPI.COMM_WORLD
            self.rank, self.size = self.mpi.Get_rank(), self.mpi.Get_size()
        else:
            self.rank, self.size = _env_rank_size()
        self.local_rank = _local_rank()
        self.created_pg = False
        if not dist.is_initialized():
            self._init_pg()
            self.created_pg = True
        if dist.get_world_size() != self.size or dist.get_rank() != self.rank:
            raise RuntimeError(f"torch.distributed has rank {dist.get_rank()} of "
                               f"{dist.get_world_size()}, MPI/env {self.rank} of {self.size}")

    def _init_pg(self):
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        addr = os.environ.get("MASTER_ADDR")
        port = os.environ.get("MASTER_PORT")
        if self.mpi is not None and (addr is None or port is None):
            if self.rank == 0:
                host = addr or ("127.0.0.1" if _single_node() else socket.gethostname())
                with socket.socket() as s:
                    s.bind(("", 0))
                    free = s.getsockname()[1]
                info = (host, port or str(free))
            else:
                info = None
            addr, port = self.mpi.bcast(info, root=0)
        addr = addr or "127.0.0.1"
        port = port or "29511"
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}",
                                rank=self.rank, world_size=self.size)

    def ddstore_comm(self):
        """What DistDataset gets as comm."""
        return self.mpi if self.kind == "mpi" else dist.group.WORLD

    def device(self):
        return local_device()

    def close(self):
        if self.created_pg and dist.is_initialized():
            dist.destroy_process_group()


def local_device():
    """cuda:<local rank> when there is a GPU (CUDA or ROCm), else cpu."""
    if torch.cuda.is_available():
        return torch.device("cuda", _local_rank() % torch.cuda.device_count())
    return torch.device("cpu")


def _single_node():
    n = os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES")
    return n is None or n == "1"


def _env_rank_size():
    for r, s in (("SLURM_PROCID", "SLURM_NTASKS"), ("RANK", "WORLD_SIZE"),
                 ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    return 0, 1


def _local_rank():
    for v in ("SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK"):
        if v in os.environ:
            return int(os.environ[v])
    return 0


# --------------------------------------------------------------- training ---
def build_loader(args, trainset, sampler, device):
    loader_kind = args.loader or ("thread" if args.num_workers > 0 else "torch")
    if loader_kind == "thread":
        from pyddstore.torch import ThreadDataLoader
        return ThreadDataLoader(trainset, batch_size=args.batch_size, sampler=sampler,
                                num_workers=args.num_workers, drop_last=True,
                                pin_memory=device.type == "cuda"), "thread"
    # report.Timed: the same epoch report (the consumer's side) for torch's loader
    from pyddstore.torch.report import Timed
    return Timed(torch.utils.data.DataLoader(
        trainset, batch_size=args.batch_size, sampler=sampler, num_workers=args.num_workers,
        drop_last=True, pin_memory=device.type == "cuda",
        persistent_workers=args.num_workers > 0), trainset), "torch"


def train(args, d, trainset, loader, sampler, device, log=print, tag=""):
    """DDP training; returns the model and per-epoch stats on every rank: the
    loss and the loader's epoch report (gathered over the ranks: wait vs
    compute per rank, the read split); rank 0 logs the report's summary."""
    from pyddstore.torch import report
    side = 28 * args.image_scale
    torch.manual_seed(args.seed)
    model = make_model(args.model, side, args.latent).to(device)
    ddp = nn.parallel.DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=args.lr)
    if not hasattr(loader, "epoch_report"):
        loader = report.Timed(loader, trainset)
    history = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        loss_sum = torch.zeros(2, dtype=torch.float64)
        # (islice: no batch beyond --max-batches is drawn, so the report counts those trained)
        for batch in itertools.islice(loader, args.max_batches or None):
            x = batch[0].to(device, non_blocking=True)
            logits, mu, logvar = ddp(x)
            loss = vae_loss(logits, x, mu, logvar)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum[0] += loss.item() * x.shape[0]
            loss_sum[1] += x.shape[0]
        # (collective: every rank; timeline for the plot, kept on rank 0)
        fig = loader.epoch_report(gather=True, timeline=True)
        if d.rank != 0:
            fig.pop("timeline", None)
        stats = loss_sum.to(device) if device.type == "cuda" else loss_sum
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)
        stats = stats.cpu()
        loss_avg = stats[0].item() / max(1.0, stats[1].item())
        pr = fig["per_rank"]
        rec = {"epoch": epoch, "loss": loss_avg, "samples": int(stats[1].item()),
               "epoch_s": max(pr["wall_s"]), "wait_s": sum(pr["wait_s"]) / d.size,
               "compute_s": sum(pr["compute_s"]) / d.size, "wait_max_s": fig["wait_max_s"],
               "report": fig}
        history.append(rec)
        if d.rank == 0:
            log(f"{tag}epoch {epoch}: loss {loss_avg:8.2f}  [{rec['samples']} samples]\n"
                + report.summary(fig), flush=True)
    return model, history


def profile_summary(trainset, d):
    """Read counters summed over ranks (and per-rank read time)."""
    try:
        prof = trainset.get_profile()
    except Exception:  # noqa: BLE001 - plain datasets have none
        return None
    keys = sorted(k for k, v in prof.items() if isinstance(v, (int, float)))
    t = torch.tensor([float(prof[k]) for k in keys], dtype=torch.float64)
    tm = t.clone()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    dist.all_reduce(tm, op=dist.ReduceOp.MAX)
    total = {k: t[i].item() for i, k in enumerate(keys)}
    maxi = {k: tm[i].item() for i, k in enumerate(keys)}
    return {"sum": total, "max": maxi, "ranks": d.size}


def format_profile(p):
    if p is None:
        return "profile: (no ddstore dataset)"
    s, ranks = p["sum"], p["ranks"]
    calls = max(1.0, s.get("calls", 0))
    rows = max(1.0, s.get("rows", 0))
    lines = [f"ddstore read profile (summed over {ranks} ranks):",
             f"  calls {int(s.get('calls', 0))}, rows {int(s.get('rows', 0))}, "
             f"bytes {s.get('bytes', 0) / 2**20:.1f} MiB "
             f"(local {s.get('local_bytes', 0) / 2**20:.1f} MiB), remote reads "
             f"{int(s.get('reads', 0))}, registrations {int(s.get('registrations', 0))}",
             f"  time in reads {s.get('total_ns', 0) / 1e9:.3f} s "
             f"({s.get('total_ns', 0) / calls / 1e3:.1f} us/call, "
             f"{s.get('total_ns', 0) / rows / 1e3:.2f} us/row)"]
    parts = [(k[:-3], s.get(k, 0)) for k in ("lock_wait_ns", "register_ns", "post_ns",
                                             "complete_ns", "gpu_sync_ns", "other_ns")]
    lines.append("  split: " + ", ".join(f"{k} {v / 1e9:.3f} s" for k, v in parts))
    return "\n".join(lines)


def save_png(path, history, model, samples, device, title=""):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    model.eval()
    with torch.no_grad():
        x = samples.to(device)
        logits, _, _ = model(x)
        rec = torch.sigmoid(logits).cpu()
    n = samples.shape[0]
    fig = plt.figure(figsize=(max(8, n * 0.9), 6))
    ax = fig.add_subplot(2, 1, 1)
    ax.plot([h["epoch"] for h in history], [h["loss"] for h in history], "o-")
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("loss (BCE + KL per sample)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    for i in range(n):
        a = fig.add_subplot(4, n, 2 * n + i + 1)
        a.imshow(samples[i, 0].numpy(), cmap="gray")
        a.axis("off")
        b = fig.add_subplot(4, n, 3 * n + i + 1)
        b.imshow(rec[i, 0].numpy(), cmap="gray")
        b.axis("off")
    fig.text(0.01, 0.40, "input", rotation=90)
    fig.text(0.01, 0.15, "reconstruction", rotation=90)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
