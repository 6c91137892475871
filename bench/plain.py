"""What the benches measure raycache against: a plain one-process training step, and the
arguments and data they share (stdlib-docs texts, torch on 2 threads)."""

from __future__ import annotations

import argparse

import pyarrow as pa
import torch

from raycache._source.demo_data import stdlib_docs


def step(opt: torch.optim.Optimizer, loss: torch.Tensor) -> None:
    """One plain optimizer step on `loss`."""
    opt.zero_grad()
    loss.backward()
    opt.step()


def parser(doc: str, epochs: int) -> argparse.ArgumentParser:
    """--rows, --epochs and --batch-size, as the benches over the docs take them."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--rows", type=int, default=300)
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--batch-size", type=int, default=32)
    return p


def docs(rows: int) -> pa.Table:
    """The first `rows` stdlib-docs rows, with torch set to 2 threads (as the benches run)."""
    torch.set_num_threads(2)
    return stdlib_docs(per_topic=1000).slice(0, rows)
