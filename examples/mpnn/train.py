"""A small message-passing network trained on synthetic variable-size graphs
served from a distributed store, with budget batches.

    tools/ddrun -n 4 -- .venv/bin/python examples/mpnn/train.py
    tools/ddrun -n 4 -- .venv/bin/python examples/mpnn/train.py --samples 20000 --budget 20000 --epochs 5

Each rank makes its share of the graphs (node counts drawn from a long-tailed
distribution, 5 to 500 nodes; node features [n, F], edges [2, e], a fixed
target) and loads it into a DistDataset with ragged fields.  A
BudgetBatchSampler caps every batch at --budget nodes (sizes read once from
the store's index, no payload), every rank takes the same number of steps,
and a ThreadDataLoader reads packed batches (Packed: values, lengths,
offsets, batch) straight into tensors.  Gradients are averaged over the ranks
with MPI (no process group needed).  Each epoch prints the loss and, over the
ranks, the time spent waiting for data next to the time computing; at the
end rank 0 writes mpnn.png (loss and wait/compute per epoch).

Options: --samples, --features, --budget, --epochs, --layers, --hidden,
--num-workers, --method, --max-batches, --out, --no-plot; --help lists them.
"""
import argparse
import os
import time

import numpy as np
import torch  # noqa: F401  (import torch before MPI starts)


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=4000, help="graphs in the data set")
    ap.add_argument("--features", type=int, default=16, help="node features")
    ap.add_argument("--budget", type=int, default=5000, help="nodes per batch, at most")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--layers", type=int, default=3, help="message-passing layers")
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--num-workers", type=int, default=2, help="loader threads")
    ap.add_argument("--method", type=int, default=None, help="store method (default: 0 "
                    "under MPI)")
    ap.add_argument("--max-batches", type=int, default=None,
                    help="stop each epoch after this many steps (every rank the same)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=".", help="where rank 0 writes mpnn.png")
    ap.add_argument("--no-plot", action="store_true")
    return ap.parse_args(argv)


def nodes_of(i, seed=0):
    """Node count of graph i: long-tailed (Pareto, shape 1.2) in [5, 500]."""
    rng = np.random.default_rng([seed, i])
    return int(min(500, 5 * (1 + rng.pareto(1.2))))


class Graphs(torch.utils.data.Dataset):
    """Synthetic graphs: a ring plus random chords; the target is a function
    of the features and the size, so the network has something to learn."""

    def __init__(self, n, features, seed=0):
        self.n, self.features, self.seed = n, features, seed

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        nn = nodes_of(i, self.seed)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.randn((nn, self.features), generator=g)
        ring = torch.arange(nn)
        src = torch.cat([ring, torch.randint(0, nn, (nn,), generator=g)])
        dst = torch.cat([(ring + 1) % nn, torch.randint(0, nn, (nn,), generator=g)])
        y = torch.tensor([float(x[:, 0].mean()) + float(np.log(nn)) / 4], dtype=torch.float32)
        return {"x": x, "edge_index": torch.stack([src, dst]), "y": y}


class MPNN(torch.nn.Module):
    """h <- relu(W_self h + W_msg sum_{j->i} h_j), then a mean over each graph."""

    def __init__(self, features, hidden, layers):
        super().__init__()
        self.inp = torch.nn.Linear(features, hidden)
        self.self_w = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden) for _ in range(layers))
        self.msg_w = torch.nn.ModuleList(torch.nn.Linear(hidden, hidden, bias=False)
                                         for _ in range(layers))
        self.out = torch.nn.Linear(hidden, 1)

    def forward(self, x, edge_index, batch, ngraphs, counts):
        h = torch.relu(self.inp(x))
        src, dst = edge_index
        for ws, wm in zip(self.self_w, self.msg_w):
            m = torch.zeros_like(h).index_add_(0, dst, h[src])
            h = torch.relu(ws(h) + wm(m))
        pooled = torch.zeros((ngraphs, h.shape[1]), dtype=h.dtype).index_add_(0, batch, h)
        return self.out(pooled / counts.clamp(min=1)[:, None].to(h.dtype)).squeeze(1)


def _graph_inputs(b):
    """Model inputs from a packed batch: edges shifted to the batch's node rows."""
    x, ei = b["x"], b["edge_index"]
    shift = x.offsets[:-1][ei.batch]                 # first node row of each edge's graph
    return x.values, ei.values + shift, x.batch, x.lengths.numel(), x.lengths


def _allreduce_grads(comm, model):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads]).numpy()
    total = np.empty_like(flat)
    from mpi4py import MPI
    comm.Allreduce(flat, total, op=MPI.SUM)
    total /= comm.Get_size()
    pos = 0
    for g in grads:
        k = g.numel()
        g.copy_(torch.from_numpy(total[pos:pos + k]).reshape(g.shape))
        pos += k


def main(argv=None):
    args = parse(argv)
    from mpi4py import MPI
    from pyddstore.torch import BudgetBatchSampler, DistDataset, ThreadDataLoader
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(args.seed)

    t0 = time.perf_counter()
    src = Graphs(args.samples, args.features, args.seed)
    kw = {} if args.method is None else {"method": args.method}
    ds = DistDataset(src, "mpnn-graphs", comm, ragged=True, **kw)
    load_s = time.perf_counter() - t0
    sampler = BudgetBatchSampler(ds, args.budget, field="x", seed=args.seed)
    loader = ThreadDataLoader(ds, batch_sampler=sampler, num_workers=args.num_workers)
    model = MPNN(args.features, args.hidden, args.layers)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    if rank == 0:
        print(f"mpnn: {len(ds)} graphs on {size} ranks loaded in {load_s:.2f} s; fields "
              f"{ds.shapes}; {len(sampler)} steps per epoch (budget {args.budget} nodes)",
              flush=True)
    history = []
    try:
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)
            steps = len(sampler) if args.max_batches is None else \
                min(len(sampler), args.max_batches)
            wait = compute = loss_sum = 0.0
            graphs = nodes = 0
            te = time.perf_counter()
            it = iter(loader)
            for _ in range(steps):
                tw = time.perf_counter()
                b = next(it)
                tc = time.perf_counter()
                wait += tc - tw
                x, ei, batch, ng, counts = _graph_inputs(b)
                pred = model(x, ei, batch, ng, counts)
                loss = torch.nn.functional.mse_loss(pred, b["y"].reshape(-1))
                opt.zero_grad()
                loss.backward()
                _allreduce_grads(comm, model)
                opt.step()
                compute += time.perf_counter() - tc
                loss_sum += loss.item() * ng
                graphs += ng
                nodes += int(counts.sum())
            del it
            epoch_s = time.perf_counter() - te
            tot = comm.allreduce(np.array([loss_sum, graphs, nodes], dtype=np.float64),
                                 op=MPI.SUM)
            waits = comm.allgather(wait)
            computes = comm.allgather(compute)
            rec = {"epoch": epoch, "steps": steps, "loss": float(tot[0] / max(tot[1], 1)),
                   "graphs": int(tot[1]), "nodes": int(tot[2]), "wait_s": wait,
                   "compute_s": compute, "epoch_s": epoch_s, "wait_max_s": max(waits),
                   "compute_max_s": max(computes)}
            history.append(rec)
            if rank == 0:
                print(f"epoch {epoch}: loss {rec['loss']:.4f}, {steps} steps, "
                      f"{rec['graphs']} graphs / {rec['nodes']} nodes; waiting for data "
                      f"{rec['wait_max_s']:.3f} s, compute {rec['compute_max_s']:.3f} s "
                      "(slowest rank)", flush=True)
    finally:
        loader.close()
        ds.free()
    if rank == 0 and not args.no_plot:
        _plot(history, os.path.join(args.out, "mpnn.png"))
    return {"history": history, "samples": len(src), "ranks": size}


def _plot(history, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ep = [h["epoch"] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(ep, [h["loss"] for h in history], marker="o")
    a.set_xticks(ep)
    a.set_xlabel("epoch")
    a.set_ylabel("MSE")
    a.set_title("loss")
    w = [h["wait_max_s"] for h in history]
    c = [h["compute_max_s"] for h in history]
    b.bar(ep, c, label="compute")
    b.bar(ep, w, bottom=c, label="waiting for data")
    b.set_xticks(ep)
    b.set_xlabel("epoch")
    b.set_ylabel("seconds (slowest rank)")
    b.set_title("time per epoch")
    b.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    main()
