"""ProbeConfig: which caches and encoders, which label, which methods and their grids, with its
local checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from raycache._cache.config import StoreConfig
from raycache._core.config import is_name, non_finite, worker_problems

__all__ = ["DEFAULT_C", "DEFAULT_METHODS", "MLP_AUTO_SIZE", "SELECT", "KnnConfig", "LogregConfig",
           "ProbeConfig", "ProbeHeadsConfig", "default_methods"]

DEFAULT_C = [1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0]
"""logreg's default grid of inverse L2 strengths (scikit-learn's C on standardised features),
one batched solve."""
DEFAULT_METHODS = ("logreg", "knn")
"""What methods left out run on every encoder (and an mlp where it costs little: MLP_AUTO_SIZE)."""
MLP_AUTO_SIZE = 2_500_000
"""methods left out: an mlp also runs on each encoder whose training rows x dimensions are at
most this (about 6,500 rows of 384-d): one head with the default mlp's settings, not the sweep
that `methods: [mlp]` trains (raycache._probe.heads.SWEEPS)."""
SELECT = ("val_acc", "macro_f1", "balanced_acc")
"""Metrics that may pick a method's setting and the best row."""


@dataclass(frozen=True)
class LogregConfig:
    """logreg: multinomial logistic regression, every C solved together by one full-batch
    L-BFGS on the standardised features (each centred and divided by its standard deviation
    over the training rows), minimising C * sum of cross-entropies + ||W||^2 / 2, bias not
    penalised: what C means to scikit-learn's `make_pipeline(StandardScaler(),
    LogisticRegression(C=C))`, and to a solved linear head in training.

    Example:
        ```python
        cfg = raycache.ProbeConfig(caches=["docs"], methods=["logreg"],
                                   logreg=raycache.LogregConfig(C=[0.01, 0.1, 1.0]))
        ```
    """

    C: list[float] = field(default_factory=lambda: list(DEFAULT_C))
    """Inverse L2 strengths to try (at least one; the issue's protocol uses 8 or more)."""
    max_iter: int = 500
    """L-BFGS iterations at most (one iteration: a gradient of every C's loss)."""
    tol: float = 1e-6
    """Stop when the largest gradient entry (of the mean loss) falls below this."""

    def problems(self) -> list[str]:
        """Local checks of logreg's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected; empty
            when there is none.

        Example:
            ```python
            raycache.LogregConfig(C=[]).problems()  # ["C=[]: expected a list ..."]
            ```
        """
        out = []
        if not self.C or any(c <= 0 for c in self.C):
            out.append(f"C={self.C}: expected a list of values > 0, e.g. "
                       "[0.01, 0.1, 1, 10]")
        if self.max_iter < 1:
            out.append(f"max_iter={self.max_iter}: must be >= 1, e.g. 500")
        if self.tol <= 0:
            out.append(f"tol={self.tol}: must be > 0, e.g. 1e-6")
        return out


@dataclass(frozen=True)
class KnnConfig:
    """knn: each validation row's k nearest training rows vote, weighted by
    exp(similarity / temperature) (DINOv2's kNN protocol), exact by blocked matrix products.

    Example:
        ```python
        cfg = raycache.ProbeConfig(caches=["docs"], methods=["knn"],
                                   knn=raycache.KnnConfig(k=[5, 20], metric="dot"))
        ```
    """

    k: list[int] = field(default_factory=lambda: [10, 20])
    """Neighbour counts to try; one search serves all of them (the largest)."""
    metric: str = "cosine"
    """cosine (rows L2-normalised first) or dot."""
    temperature: float = 0.07
    """Votes weigh exp(similarity / temperature)."""
    block_rows: int = 8192
    """Training rows per matrix product (memory: queries x block_rows floats)."""

    def problems(self) -> list[str]:
        """Local checks of knn's settings.

        Returns:
            One line per problem, naming the field, the value and what is expected; empty
            when there is none.

        Example:
            ```python
            raycache.KnnConfig(metric="l2").problems()  # ["metric='l2': expected ..."]
            ```
        """
        out = []
        if not self.k or any(k < 1 for k in self.k):
            out.append(f"k={self.k}: expected a list of whole numbers >= 1, e.g. [10, 20]")
        if self.metric not in ("cosine", "dot"):
            out.append(f"metric={self.metric!r}: expected 'cosine' or 'dot'")
        if self.temperature <= 0:
            out.append(f"temperature={self.temperature}: must be > 0, e.g. 0.07")
        if self.block_rows < 1:
            out.append(f"block_rows={self.block_rows}: must be >= 1, e.g. 8192")
        return out


@dataclass(frozen=True)
class ProbeHeadsConfig:
    """linear, mlp: heads trained by raycache's sweep (every member on the same batches, in
    one run), the best member picked on validation.

    Example:
        ```python
        mlp = raycache.ProbeHeadsConfig(sweep={"optim.lr": [1e-3, 3e-3], "hidden": [[512]]},
                                        train={"loop": {"epochs": 30}})
        cfg = raycache.ProbeConfig(caches=["docs"], methods=["mlp"], mlp=mlp)
        ```
    """

    sweep: dict[str, list[Any]] = field(default_factory=dict)
    """The sweep's grid (raycache._train.sweep.grid.KEYS); left out: the method's default."""
    train: dict[str, Any] = field(default_factory=dict)
    """Other TrainConfig settings of the run, e.g. {loop: {epochs: 30}, hidden: [512]}."""


@dataclass
class ProbeConfig:
    """A probe: which caches and encoders to compare on one label, by which methods.

    `raycache.probe` takes this, or the same as a dict or a YAML file.

    Example:
        ```python
        cfg = raycache.ProbeConfig(caches=["docs", "docs-bge"], label="label",
                                   methods=["logreg", "knn", "linear"])
        result = raycache.probe(cfg)
        ```
    """

    caches: list[str]
    """Committed caches to compare, each NAME or NAME/FINGERPRINT (newest fill when left out)."""
    store: StoreConfig = field(default_factory=StoreConfig)
    """The store that holds the caches ($RAYCACHE_STORE, else .raycache/store)."""
    label: str | None = None
    """Label column (class ids or names); each cache's first label when left out."""
    encoders: list[str] | None = None
    """Which embedding columns to probe, each on its own; every encoder of each cache when
    left out (an encoder a cache lacks is skipped there, but each must be in one cache)."""
    methods: list[str] | None = None
    """Keys of raycache.probe.METHODS: logreg, knn, linear, mlp; left out: logreg and knn on
    every encoder, and mlp too on each encoder of at most MLP_AUTO_SIZE training rows x
    dimensions (2.5M) probed in this process: one head, the default mlp (named here, mlp
    trains its sweep)."""
    logreg: LogregConfig = field(default_factory=LogregConfig)
    """logreg's settings: the C grid, iterations, tolerance."""
    knn: KnnConfig = field(default_factory=KnnConfig)
    """knn's settings: the k values, the metric, the temperature."""
    linear: ProbeHeadsConfig = field(default_factory=ProbeHeadsConfig)
    """linear's settings: the sweep's grid and other training settings."""
    mlp: ProbeHeadsConfig = field(default_factory=ProbeHeadsConfig)
    """mlp's settings: the sweep's grid and other training settings."""
    lexical: bool | str = "auto"
    """A lexical baseline as a row of the table (TF-IDF of word and character n-grams and a
    linear SVM, scikit-learn, on the source texts of the same rows and split): auto
    runs it for caches with a text encoder whose source is still readable, of at most 200,000
    rows, where scikit-learn is installed; true runs it or fails saying why; false never."""
    val_fraction: float = 0.2
    """Fraction of rows held out by a hash of the key: the same split training uses for it."""
    select: str = "val_acc"
    """What picks each method's setting and the best row: val_acc, macro_f1, balanced_acc."""
    device: str = "auto"
    """Where logreg and knn compute in this process: cpu, cuda, or auto (cuda where there is
    one); Ray workers compute on their CPUs."""
    num_workers: int | str = "auto"
    """Ray workers that each hold a part of the rows (logreg summed over them, knn searched
    per part and merged, linear and mlp as DDP workers); 0 runs in this process; auto: 0 where
    the features take under a quarter of this machine's available memory, else enough workers
    for them (raycache._compute.workers)."""
    cpus_per_worker: float = 0.5
    """CPUs Ray reserves per worker: fractional ones leave room for Ray's own tasks."""
    name: str | None = None
    """Report folder under the first cache's probes/; derived from the config when left out."""
    report: bool = True
    """Write the report (result.json, table.md, PNGs) and the best head under the store."""
    progress: bool = True
    """Print one line per (encoder, method) as it finishes."""

    def problems(self) -> list[str]:
        """Local checks, logreg's and knn's included; those that consult the METHODS registry
        are in probe.plan.

        Returns:
            One line per problem, naming the field, the value and what is expected; empty
            when there is none.

        Example:
            ```python
            raycache.ProbeConfig(caches=[]).problems()  # ["caches=[]: name at least one ..."]
            ```
        """
        out = []  # logreg's and knn's own: the loader walks them
        if not self.caches:
            out.append("caches=[]: name at least one committed cache, e.g. [docs]")
        if not 0.0 < self.val_fraction < 1.0:
            out.append(f"val_fraction={self.val_fraction}: expected a value in (0, 1), e.g. 0.2")
        if self.select not in SELECT:
            out.append(f"select={self.select!r}: expected one of {SELECT}")
        if self.device not in ("auto", "cpu", "cuda"):
            out.append(f"device={self.device!r}: expected 'auto', 'cpu' or 'cuda'")
        out += worker_problems(self, "Ray")
        if self.name is not None and not is_name(self.name):
            out.append(f"name={self.name!r}: use letters, digits, '-', '_' or '.'")
        if self.lexical not in (True, False, "auto"):
            out.append(f"lexical={self.lexical!r}: expected auto, true or false")
        if self.methods is not None and not self.methods:
            out.append("methods=[]: name at least one, e.g. [logreg, knn]")
        if self.methods and len(set(self.methods)) != len(self.methods):
            out.append(f"methods={self.methods}: a method is named twice")
        return non_finite(self) + out


def default_methods(rows: int, dim: int) -> list[str]:
    """The methods run on an encoder of `rows` training rows x `dim` when methods are left
    out: DEFAULT_METHODS, and mlp where rows x dim <= MLP_AUTO_SIZE."""
    return [*DEFAULT_METHODS, *(["mlp"] if rows * dim <= MLP_AUTO_SIZE else [])]
