"""What rank 0 writes as each epoch ends, not only when the run does: metrics.jsonl rewritten
whole (never torn), TensorBoard events flushed into the run folder, and the run's callbacks
(`TrainConfig.tracking`) told."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from typing import Any

from raycache._train.folder import checkpoints as ckpt
from raycache._train.folder.metrics import TENSORBOARD, write_metrics
from raycache._train.runspec import WorkerSpec
from raycache._train.tracking.configured import build
from raycache._train.tracking.hook import RunContext, TrainCallback, params, scalars

__all__ = ["Live"]


class Live:
    """Rank 0's live record of a run: `epoch_end` after each epoch, `failed` or `end` once."""

    def __init__(self, spec: WorkerSpec, callbacks: list[TrainCallback] | None = None) -> None:
        self.spec = spec
        self.callbacks = build(spec.tracking) if callbacks is None else callbacks
        settings = {"head": spec.head.to_dict(), **dataclasses.asdict(spec.recipe)}
        if spec.sweep:
            settings["sweep"] = {"members": [m.settings_dict() for m in spec.sweep],
                                 "select": spec.select}
        self.context = RunContext(run_name=spec.run_name, run_dir=spec.run_dir,
                                  cache=spec.head.cache, epochs=spec.recipe.loop.epochs,
                                  config=params(settings))
        self._board: Any = None
        self._tmp = tempfile.TemporaryDirectory(prefix="raycache-tb-")
        for cb in self.callbacks:
            cb.before_run(self.context)

    def epoch_end(self, history: list[dict[str, Any]], saved: bool) -> None:
        """The epoch just recorded (history[-1]) into metrics.jsonl, TensorBoard and every
        callback; `saved`: this epoch wrote a checkpoint."""
        spec, m = self.spec, history[-1]
        write_metrics(spec.store, spec.run_dir, history)
        self._events(m)
        folder = f"{spec.run_dir}/{ckpt.checkpoint_name(int(m['epoch']))}" if saved else None
        for cb in self.callbacks:
            cb.after_report(self.context, [m], folder)

    def failed(self, error: BaseException) -> None:
        """The run failed: every callback told (one failing is not the run's error)."""
        for cb in self.callbacks:
            with contextlib.suppress(Exception):
                cb.after_exception(self.context, error)
        self._close()

    def end(self, history: list[dict[str, Any]]) -> None:
        """The run ended: every callback told, the event writer closed."""
        self._close()
        for cb in self.callbacks:
            cb.after_run(self.context, history)

    def _events(self, m: dict[str, Any]) -> None:
        from tensorboardX import SummaryWriter

        if self._board is None:
            self._board = SummaryWriter(os.path.join(self._tmp.name, TENSORBOARD))
        for k, v in scalars(m).items():
            self._board.add_scalar(k, v, global_step=int(m["epoch"]))
        self._board.flush()
        for root, _, files in os.walk(self._tmp.name):
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), self._tmp.name)
                with open(os.path.join(root, name), "rb") as f:
                    self.spec.store.write_atomic(f"{self.spec.run_dir}/{rel.replace(os.sep, '/')}",
                                                 f.read())

    def _close(self) -> None:
        if self._board is not None:
            self._board.close()
            self._board = None
        self._tmp.cleanup()
