"""TrainResult: what a training run did, as `raycache.train` returns it: history, checkpoint,
the epoch whose weights it serves, a sweep's members, and its summary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from raycache._cache.committed import Cache
from raycache._train.console import (
    number,
    settings_text,
    solved_outcome,
    solved_text,
    sweep_text,
)
from raycache._train.runspec import RunSpec

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from raycache._heads.loaded import Head

__all__ = ["TrainResult"]


@dataclass
class TrainResult:
    """What a training run did: its history, checkpoint, best epoch and sweep.

    Example:
        ```python
        print(raycache.train({"cache": "docs", "head": "mlp"}).summary())
        ```
    """
    cache: Cache
    """The committed cache it trained on."""
    spec: RunSpec
    """What the run did: head, recipe, workers, placement, run folder."""
    history: list[dict[str, Any]]
    """One dict of metrics per epoch."""
    checkpoint: str
    """URI of the final checkpoint folder (head.pt, head.json, state.pt)."""
    seconds: float
    """Wall time of the call."""
    resumed_from: list[int] = field(default_factory=list)
    """Epochs this run resumed from (empty for a run that never stopped)."""
    sweep: list[dict[str, Any]] = field(default_factory=list)
    """A sweep's members, one dict each: member, settings, the select metric's value, epoch
    (whose weights count), selected, stopped, epochs, metrics (last epoch's) and history."""
    monitored: dict[str, Any] = field(default_factory=dict)
    """The monitored metric's best value and its epoch, e.g. {"val_acc": 0.93, "epoch": 4}
    (a sweep: the select metric's, of the selected member)."""
    weights: str = "last"
    """Whose weights the checkpoint holds: the "best" epoch's (the default) or the "last"'s."""
    weights_epoch: int = 0
    """The epoch whose head weights the checkpoint holds (what load_head and predict use)."""
    first_epoch: int = 0
    """Epochs the run had done before this call (a resumed run); this call trained the rest."""
    finished_before: str = ""
    """When it had finished before this call (run.json's time; nothing trained now); else ""."""

    @property
    def metrics(self) -> dict[str, Any]:
        """The last epoch's metrics."""
        return self.history[-1] if self.history else {}

    def served_metrics(self) -> dict[str, Any]:
        """The metrics of the epoch whose weights the checkpoint holds.

        Returns:
            That epoch's metrics (a sweep: the selected member's); the last epoch's when the
            history lacks it.
        """
        history = self.best.get("history", self.history) if self.sweep else self.history
        return next((m for m in history if m.get("epoch") == self.weights_epoch), self.metrics)

    @property
    def run_dir(self) -> str:
        """The run folder, as a URI: run.json, metrics.jsonl, checkpoint_* folders."""
        return self.cache.store.url(self.spec.run_dir)

    def held_out(self, keys: Any) -> np.ndarray:
        """Which of `keys` this run held out for validation (the same hash of the key).

        Args:
            keys: A cache's key values: a list, or an Arrow or pandas column.

        Returns:
            One bool per key, True where held out: rows to evaluate on unseen by training.

        Example:
            ```python
            df = run.cache.to_pandas()
            unseen = df[run.held_out(df["id"])]
            ```
        """
        import numpy as np
        import pyarrow as pa

        from raycache._fit.split import validation_mask

        keys = keys if isinstance(keys, pa.Array | pa.ChunkedArray) else pa.array(list(keys))
        fraction = self.spec.recipe.evaluation.val_fraction
        return np.asarray(validation_mask(keys, fraction).to_pylist(), dtype=bool)

    def load_head(self, trust_code: bool | Sequence[str] = False) -> Head:
        """The trained head, ready to predict from raw inputs or embeddings.

        Args:
            trust_code: Let head.json name code to run (see `raycache.load_head`): True for
                any, or the allowed prefixes of factory paths.

        Returns:
            The head from `checkpoint`, on the CPU.

        Raises:
            RaycacheError: The checkpoint is unreadable.
            UntrustedCode: head.json names code that trust_code does not allow.
        """
        from raycache._heads.loaded import load_head

        return load_head(self.checkpoint, trust_code=trust_code,
                         **self.cache.store.fsspec_options())

    def history_frame(self) -> pd.DataFrame:
        """Metrics per epoch as a DataFrame (plot it with .plot(x="epoch")).

        Returns:
            One row per epoch, one column per metric.
        """
        import pandas as pd

        return pd.DataFrame(self.history)

    @property
    def best(self) -> dict[str, Any]:
        """A sweep's selected member (its record, as in `sweep`); a single head's monitored
        metric at its best epoch, e.g. {"val_acc": 0.93, "epoch": 4}."""
        if self.sweep:
            return next((row for row in self.sweep if row["selected"]), {})
        return dict(self.monitored)

    @property
    def diverged(self) -> list[dict[str, Any]]:
        """The sweep members that diverged and stopped alone: member, settings, and where."""
        return [{"member": row["member"], "settings": row["settings"],
                 "error": row["diverged"]} for row in self.sweep if row.get("diverged")]

    def sweep_frame(self) -> pd.DataFrame:
        """A sweep's members as a DataFrame: one row each, its settings as columns.

        Returns:
            The members' settings, select metric, epoch, selected and stopped; empty for a
            single head.
        """
        import pandas as pd

        return pd.DataFrame([{**row["settings"], **{k: v for k, v in row.items()
                                                     if k not in ("settings", "history")}}
                             for row in self.sweep])

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready values (`--json`): the version, run, checkpoint, the served
        epoch's metrics, the last's, the history and a sweep's members; never the Cache's store
        (its options, credentials).

        Returns:
            A dict of plain values.
        """
        s = self.spec
        return {"cache": self.cache.name, "fingerprint": self.cache.fingerprint,
                "run_name": s.run_name, "run_dir": self.run_dir, "checkpoint": self.checkpoint,
                "head": s.head.head, "objective": s.recipe.objective,
                "monitor": s.select if self.sweep else s.recipe.evaluation.monitor,
                "num_workers": s.num_workers, "seconds": self.seconds,
                "epochs": len(self.history), "first_epoch": self.first_epoch,
                "resumed_from": list(self.resumed_from), "weights": self.weights,
                "weights_epoch": self.weights_epoch, "served": self.served_metrics(),
                "metrics": self.metrics, "best": self.best, "history": self.history,
                "sweep": [{k: v for k, v in row.items() if k != "history"}
                          for row in self.sweep],
                "finished_before": self.finished_before}

    def summary(self) -> str:
        """What this call did, in one line or two.

        Returns:
            What it trained (or that the run had already finished), the monitored metric, the
            run and its checkpoint.
        """
        s, where = self.spec, f"{self.cache.name}/{self.cache.fingerprint[:12]}"
        what = (sweep_text([row["settings"] for row in self.sweep], s.head.head) if self.sweep
                else s.head.head)
        if self.finished_before:
            return (f"train {what} on {where}: run {s.run_name} had already finished "
                    f"({self.finished_before}, in {self.run_dir}); nothing was trained now. "
                    f"It has {len(self.history)} epochs; {self._outcome()}; checkpoint "
                    f"{self.checkpoint}.\nTo train a new run of this config, set resume: "
                    "false (command line: --set resume=false), or give it another run_name")
        workers = f"{s.num_workers} DDP workers" if s.num_workers else "in-process"
        workers += f" ({s.why})" if s.why else ""
        total, done = s.recipe.loop.epochs, len(self.history)
        epochs = (f"trained epoch {done} of {total}" if done == self.first_epoch + 1 else
                  f"trained epochs {self.first_epoch + 1}-{done} of {total}")
        if done <= self.first_epoch:
            epochs = f"trained no epoch (all {done} were done before)"
        if self.first_epoch:
            epochs += f" (resumed from epoch {self.first_epoch})"
        if self.first_epoch < done < total:
            epochs += ", stopped early"
        epochs = solved_text(self.history, self.first_epoch) or epochs
        return (f"train {what} on {where}: {epochs}, {workers}, {self.seconds:.1f} s; "
                f"{self._outcome()}; run {s.run_name}, checkpoint {self.checkpoint}")

    def _outcome(self) -> str:
        """The monitored metric's best (a sweep: the selected member's select metric), named,
        and whose weights the checkpoint holds."""
        s, best = self.spec, self.best
        key = s.select if self.sweep else s.recipe.evaluation.monitor
        shown, epoch = number(best.get(key)), best.get("epoch", "?")
        if self.sweep:
            gone = "".join(f"; member #{d['member']} {settings_text(d['settings'])} DIVERGED "
                           "(stopped alone, lr 0; see the run's sweep records)"
                           for d in self.diverged)
            return (f"selected member #{best.get('member')} "
                    f"{settings_text(best.get('settings', {}))}: {key} {shown} at epoch {epoch}"
                    + gone)
        if self.history and self.history[-1].get("solver") == "lbfgs":
            return solved_outcome(self.metrics)
        served, last = self.served_metrics(), self.metrics
        held = (f"the checkpoint holds epoch {served.get('epoch', self.weights_epoch)}'s weights"
                + (", the last" if self.weights == "last" else ""))
        text = f"{held}: {_scores(served)}" if _scores(served) else held
        text += f"; best {key} {shown} at epoch {epoch} (monitored)"
        if last is not served and _scores(last):
            text += f"; last epoch {last.get('epoch', len(self.history))}: {_scores(last)}"
        return text

    def __repr__(self) -> str:
        return f"TrainResult({self.summary()})"


def _scores(metrics: dict[str, Any]) -> str:
    """An epoch's headline metrics: accuracy (and macro-F1 where measured) and loss."""
    return ", ".join(f"{k} {number(metrics[k])}" for k in ("val_acc", "macro_f1", "val_f1",
                                                            "val_loss") if k in metrics)
