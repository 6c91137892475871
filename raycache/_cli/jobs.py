"""The command line's commands that run work from a YAML config: fill, train, pipeline and
probe; `--set` overrides, `--config -` and `--json` summaries."""

from __future__ import annotations

import argparse
from functools import partial

from raycache._cli.command import Command
from raycache._cli.scripting import OK, add_json, config_arg, summary
from raycache._cli.words import store_folder
from raycache._core.overrides import overridden

__all__ = ["COMMANDS", "EXAMPLES", "add_overrides"]

EXAMPLES = {"fill": "rows_per_shard=512", "train": "optim.lr=1e-3 or loop.epochs=5",
            "pipeline": "train.optim.lr=1e-3", "predict": "pool.batch_size=64",
            "probe": "methods=[logreg,knn] or logreg.C=[0.1,1,10]"}
"""An example of --set per command."""
TEXTS = {"fill": "fill a cache from a YAML config",
         "train": "train a head on a cache from a YAML config",
         "pipeline": "fill, then train on that fill, from one YAML config",
         "probe": "compare encoders and heads on caches (logreg, knn, linear, mlp) from a YAML "
                  "config"}


def add_overrides(p: argparse.ArgumentParser, example: str, what: str = "the config") -> None:
    """A command's repeatable --set KEY=VALUE."""
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help=f"override a setting of {what} (repeatable): KEY dotted into its "
                        f"groups, VALUE read as YAML, e.g. {example}")


def job_options(name: str, p: argparse.ArgumentParser) -> None:
    """fill, train, pipeline or probe: --config, --set, --store, --no-progress, --json."""
    p.add_argument("--config", required=True, help="the YAML config file (-: from stdin)")
    add_overrides(p, EXAMPLES[name])
    p.add_argument("--store", help="store URI; replaces the config's store.uri "
                                   "(default: the config's)")
    p.add_argument("--no-progress", action="store_true",
                   help="print no progress bars or per-epoch lines while it runs")
    add_json(p, "the summary's fields (progress and logs go to stderr)")


def fill(args: argparse.Namespace) -> int:
    from raycache._fill.run import fill as run

    store_folder(args.store)
    with summary(args.json) as out:
        config = overridden(config_arg(args.config), args.overrides, args.store)
        out(run(config, progress=not args.no_progress))
    return OK


def train(args: argparse.Namespace) -> int:
    from raycache._train.driver.run import train as run

    store_folder(args.store)
    with summary(args.json) as out:  # the loop printed its epochs; the summary, the served's
        config = overridden(config_arg(args.config), args.overrides, args.store, flat=("sweep",))
        out(run(config, progress=not args.no_progress))
    return OK


def pipeline(args: argparse.Namespace) -> int:
    from raycache._pipeline import pipeline as run

    store_folder(args.store)
    with summary(args.json) as out:
        config = overridden(config_arg(args.config), args.overrides, args.store,
                            ("fill.store", "train.store"), flat=("train.sweep",))
        result = run(config, progress=not args.no_progress)
        out(result, result.train.summary())
    return OK


def probe(args: argparse.Namespace) -> int:
    from raycache._cli.tables import frame_table
    from raycache._pipeline import probe as run

    store_folder(args.store)
    with summary(args.json) as out:
        result = run(overridden(config_arg(args.config), args.overrides, args.store,
                                flat=("linear.sweep", "mlp.sweep")), progress=not args.no_progress)
        table = result.table.assign(seconds=result.table.seconds.round(1))
        out(result, frame_table(table), result.summary())
    return OK


COMMANDS = tuple(Command(name, TEXTS[name], partial(job_options, name), run) for name, run in
                 {"fill": fill, "train": train, "pipeline": pipeline, "probe": probe}.items())
