"""A probe's Ray worker: its part of a cache's rows (read as a DDP worker reads its part, by
raycache._fit.part, split by key), and the methods' work on it; only small arrays go back (a
loss and gradient, top-k neighbours, confusion counts), never the rows or their predictions."""

from __future__ import annotations

from typing import Any

import numpy as np

from raycache._cache.store import Store
from raycache._fit.part import Reading, features, label_ids, load_part
from raycache._fit.split import validation_mask
from raycache._probe.knn import QUERY_ROWS, merge, neighbours, predict, prepared
from raycache._probe.metrics import confusion

__all__ = ["PartWorker"]


class PartWorker:
    """One part of the rows, every encoder of the cache held as (x_train, y_train, x_val,
    y_val); run as a Ray actor (raycache._probe.on_ray.Workers starts them)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[np.ndarray, ...]] = {}
        self.preds: dict[tuple[str, str], list[np.ndarray]] = {}

    def load(self, reading: Reading, key: str, label: str, names: tuple[str, ...],
             columns: tuple[str, ...], rank: int, world: int, val_fraction: float
             ) -> tuple[int, int]:
        """Read this rank's part of the cache (the rows and shards training's rank would
        read, each shard checked), the embedding `columns` and the `label` (class `names`),
        and split it by `key`: (training rows, validation rows)."""
        self.rows, self.preds = {}, {}
        table = load_part(reading, [key, label, *columns], rank, world)
        if table is None:
            return 0, 0
        held = validation_mask(table.column(key), val_fraction).to_numpy(zero_copy_only=False)
        y = label_ids(table.column(label), names)
        for column in columns:
            x = np.array(features(table, (column,)), dtype=np.float32, copy=True)
            self.rows[column] = (x[~held], y[~held], x[held], y[held])
        return int((~held).sum()), int(held.sum())

    def logreg_sums(self, column: str) -> Any:
        """This part's training rows' moment sums (raycache._fit.logreg.moment_sums): every
        part's added up standardise the features as in this process."""
        import torch

        from raycache._fit.logreg import moment_sums

        return moment_sums(torch.from_numpy(self._train(column)[0]))

    def logreg_term(self, column: str, params: Any, classes: int, groups: int, rows: int,
                    scale: tuple[Any, Any]) -> tuple[Any, Any]:
        """This part's contribution to every C's data term (raycache._fit.logreg.data_term) on its
        training rows standardised by `scale` (every part's mean, sd), over `rows` training
        rows of all parts: ([G], [G, m])."""
        import torch

        from raycache._core.threads import sized
        from raycache._fit.logreg import data_term

        x, y = self._train(column)
        z = (torch.from_numpy(x) - scale[0]) / scale[1]
        with sized(4 * x.shape[0] * x.shape[1] * groups * classes):
            return data_term(z, torch.from_numpy(y), classes, groups, rows)(params)

    def logreg_confusion(self, column: str, w: Any, b: Any) -> np.ndarray:
        """Each C's confusion counts on this part's validation rows: [G, K, K]."""
        import torch

        _, _, xv, yv = self.rows[column]
        g, d, k = w.shape
        logits = (torch.from_numpy(xv) @ w.permute(1, 0, 2).reshape(d, -1)).view(
            len(xv), g, k) + b
        preds = logits.argmax(-1).numpy()
        self.preds[(column, "logreg")] = [preds[:, i] for i in range(g)]
        return np.stack([confusion(yv, preds[:, i], k) for i in range(g)])

    def val_rows(self, column: str) -> np.ndarray:
        """This part's validation features: the queries every worker's search takes."""
        return self.rows[column][2]

    def knn_top(self, column: str, queries: list[Any], kmax: int, metric: str,
                block_rows: int) -> tuple[tuple[Any, Any], ...]:
        """For each rank's queries (object refs of their rows), their kmax most similar rows
        of this part: (similarities, labels), best first."""
        import ray
        import torch

        from raycache._core.threads import sized

        x, y = self._train(column)
        bank, labels = prepared(x, metric, "cpu"), torch.from_numpy(y)
        out, queries = [], ray.get(list(queries))
        most = min(max((len(q) for q in queries), default=0), QUERY_ROWS)
        with sized(2 * most * min(len(x), block_rows) * x.shape[1]):
            for q in queries:
                sims, found = [], []
                for start in range(0, len(q), QUERY_ROWS):
                    s, i = neighbours(prepared(q[start: start + QUERY_ROWS], metric, "cpu"),
                                      bank, kmax, block_rows)
                    sims.append(s)
                    found.append(labels[i])
                empty = torch.zeros((0, min(kmax, len(x))))
                out.append((torch.cat(sims) if sims else empty,
                            torch.cat(found) if found else empty.long()))
        return tuple(out)

    def knn_confusion(self, column: str, parts: list[Any], ks: list[int], classes: int,
                      temperature: float) -> np.ndarray:
        """This rank's queries' neighbours from every part (object refs, merged: the top
        max(ks) of all), their votes for each k, and each k's confusion counts: [len(ks), K,
        K]."""
        import ray

        yv = self.rows[column][3]
        if not len(yv):
            return np.zeros((len(ks), classes, classes), np.int64)
        sims, labels = merge(ray.get(list(parts)), max(ks))
        found = predict(sims, labels, ks, classes, temperature)
        self.preds[(column, "knn")] = [found[k] for k in ks]
        return np.stack([confusion(yv, found[k], classes) for k in ks])

    def head_confusion(self, column: str, checkpoint: str, store: Store, classes: int
                       ) -> np.ndarray:
        """A trained head's (a checkpoint folder's, in `store`) confusion counts on this
        part's validation rows: [K, K]."""
        from raycache._heads.loaded import load_head

        _, _, xv, yv = self.rows[column]
        head = load_head(checkpoint, **store.fsspec_options())
        pred = head.predict_ids(xv) if len(xv) else yv[:0]
        self.preds[(column, "head")] = [pred]
        return confusion(yv, pred, classes)

    def predictions(self, column: str, method: str) -> list[np.ndarray]:
        """The last predictions of `method` (logreg, knn, head) on this part's validation
        rows, one array per setting: for tests, which compare them with the in-process
        path's."""
        return self.preds.get((column, method), [])

    def _train(self, column: str) -> tuple[np.ndarray, np.ndarray]:
        x, y, _, _ = self.rows[column]
        return x, y
