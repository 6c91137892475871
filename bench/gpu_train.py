"""GPU benchmark (not a test): head epochs on a cached N-row cache (cheap encoder, 384-d, 10
classes) with the rows in GPU memory, against a plain loop over a preloaded CUDA tensor (same
head, batch, optimizer), measured in the same run. Runs raycache's defaults (use_gpu, auto
workers: one NCCL worker per GPU for a cache this size) and in-process on the GPU.

    python bench/gpu_train.py --rows 1000000 --epochs 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from scale import fill_config, make_source, read_shards  # noqa: E402


def plain_cuda(x: torch.Tensor, y: torch.Tensor, epochs: int, batch: int) -> float:
    """Epoch rows/s of a plain loop over a preloaded CUDA tensor: linear head, AdamW."""
    x, y = x.cuda(), y.cuda()
    head = torch.nn.Linear(x.shape[1], 10).cuda()
    opt = torch.optim.AdamW(head.parameters(), 1e-3)
    seconds = []
    for _ in range(epochs + 1):  # the first epoch warms up and is not counted
        torch.cuda.synchronize()
        start = time.perf_counter()
        for idx in torch.randperm(len(x), device="cuda").split(batch):
            loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return len(x) / min(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4096)
    args = parser.parse_args()
    import os

    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    import raycache

    with tempfile.TemporaryDirectory() as tmp:
        make_source(Path(tmp, "src"), args.rows)
        start = time.perf_counter()
        fill = raycache.fill(fill_config("big", Path(tmp, "src"), Path(tmp, "store")))
        print(f"fill {args.rows} rows: {time.perf_counter() - start:.1f} s ({fill.pool})")
        x, y = read_shards(fill.cache)
        train = {"cache": "big", "store": {"uri": str(Path(tmp, "store"))},
                 "epochs": args.epochs + 1, "batch_size": args.batch_size, "lr": 1e-3,
                 "progress": False, "resume": False, "use_gpu": True, "solver": "gradient"}
        runs = {"defaults (use_gpu, auto workers)": raycache.train(train),
                "in-process on the GPU": raycache.train({**train, "num_workers": 0})}
    n_train = runs["in-process on the GPU"].metrics["train_rows"]
    plain = plain_cuda(x[:n_train], y[:n_train], args.epochs, args.batch_size)
    print(f"\n{args.rows} rows x 384, linear head, batch {args.batch_size}, AdamW, "
          f"{torch.cuda.get_device_name()}")
    print(f"{'run':<36}{'epoch rows/s':>14}{'vs plain':>10}   placement")
    print(f"{'plain loop (CUDA tensor)':<36}{plain:>14.0f}{1.0:>9.2f}x")
    for name, run in runs.items():
        best = min(m["epoch_seconds"] for m in run.history[1:])
        rows_s = n_train / best
        print(f"{name:<36}{rows_s:>14.0f}{rows_s / plain:>9.2f}x   "
              f"{run.spec.placement}, {run.spec.num_workers} worker(s)")


if __name__ == "__main__":
    main()
