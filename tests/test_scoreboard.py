"""An honest scoreboard: a training summary headlines the served head's metrics and epoch (the
last epoch's only beside them, where it differs); the command line prints each epoch once
(never a "final" copy) and none with --no-progress. In-process: no Ray."""

import dataclasses

import pyarrow.parquet as pq
import pytest
import yaml

import raycache
from raycache._cli import main
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("scoreboard")
    (root / "src").mkdir()
    pq.write_table(separable(n=200), root / "src" / "a.parquet")
    raycache.fill(toy_fill(str(root / "src"), str(root / "store"), in_process=True))
    return str(root / "store")


def train_yaml(store: str, folder, **over) -> str:
    path = folder / "train.yaml"
    path.write_text(yaml.safe_dump({"cache": "toy", "store": {"uri": store}, "head": "mlp",
                                    "hidden": [16], "epochs": 3, "num_workers": 0, **over}))
    return str(path)


def test_the_summary_headlines_the_served_epoch_not_the_last(store):
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "head": "mlp", "epochs": 3,
                          "hidden": [16], "num_workers": 0, "progress": False,
                          "monitor": "val_loss"})
    history = [{**m, "val_acc": acc, "val_f1": acc - 0.1, "val_loss": loss} for m, acc, loss in
               zip(run.history, (0.5, 0.9, 0.7), (0.9, 0.3, 0.6), strict=True)]
    served = dataclasses.replace(run, history=history, weights="best", weights_epoch=2,
                                 monitored={"val_loss": 0.3, "epoch": 2})
    text = served.summary()
    assert ("the checkpoint holds epoch 2's weights: val_acc 0.9000, val_f1 0.8000, val_loss "
            "0.3000; best val_loss 0.3000 at epoch 2 (monitored); last epoch 3: val_acc 0.7000, "
            "val_f1 0.6000, val_loss 0.6000") in text
    assert text.index("val_acc 0.9000") < text.index("val_acc 0.7000")
    last = dataclasses.replace(served, weights_epoch=3, weights="last")
    assert "holds epoch 3's weights, the last: val_acc 0.7000" in last.summary()
    assert "last epoch 3:" not in last.summary()  # the served epoch is the last: said once


def test_no_progress_prints_no_epoch_line(store, tmp_path, capsys):
    assert main(["train", "--config", train_yaml(store, tmp_path, seed=2), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "trained epochs 1-3 of 3" in out  # trained now, not an earlier run returned
    assert "epoch 1/3" not in out and "epoch 3/3" not in out
    assert "the checkpoint holds epoch" in out and "val_acc" in out


def test_progress_prints_each_epoch_once(store, tmp_path, capsys):
    assert main(["train", "--config", train_yaml(store, tmp_path, seed=1)]) == 0
    out = capsys.readouterr().out
    assert "trained epochs 1-3 of 3" in out
    assert [out.count(f"epoch {e}/3") for e in (1, 2, 3)] == [1, 1, 1], out
    assert "final " not in out


@pytest.mark.parametrize(("c", "iterations", "said"), [
    (10.0, 40, "C is the grid's largest (0.1, 1, 10): a weaker penalty, untried, might score"),
    (0.1, 40, "C is the grid's smallest (0.1, 1, 10): a stronger penalty, untried"),
    (1.0, 100, "stopped at the 100-iteration cap before converging"),
])
def test_a_solved_head_at_the_grids_edge_or_the_cap_says_so(c, iterations, said):
    from raycache._train.console import solved_text

    solved = {"solver": "lbfgs", "train_rows": 100, "l2_C": c, "lbfgs_iterations": iterations}
    assert said in solved_text([solved], 0)
    inside = {**solved, "l2_C": 1.0, "lbfgs_iterations": 40}
    assert solved_text([inside], 0).endswith("C=1 chosen on the validation rows, 40 iterations)")


def test_a_solved_heads_epoch_line_shows_its_c_not_a_learning_rate():
    from raycache._train.console import epoch_text

    row = {"epoch": 1, "train_loss": 0.05, "val_acc": 0.87, "rows_per_s": 7050.0}
    solved = epoch_text({**row, "lr": 0.0, "l2_C": 0.1}, 1, "val_loss")
    assert "C 0.1" in solved and "lr" not in solved
    assert "lr 1.00e-03" in epoch_text({**row, "lr": 1e-3}, 1, "val_loss")


def test_a_solved_head_chooses_c_on_training_rows_and_reports_validation_it_never_used(store):
    run = raycache.train({"cache": "toy", "store": {"uri": store}, "num_workers": 0,
                          "progress": False, "run_name": "solved-honest"})
    solved = run.history[-1]
    assert solved["solver"] == "lbfgs"
    train_rows = solved["train_rows"]
    assert solved["l2_chosen_on"] == round(0.2 * train_rows)  # training rows, not validation
    assert "training rows held out of the solve" in solved["l2_grid"]
    assert (f"chosen on {solved['l2_chosen_on']} training rows left out of its solve, then "
            "solved on all") in run.summary()
    assert raycache.evaluate(run).accuracy == pytest.approx(run.served_metrics()["val_acc"])


def test_runs_lines_show_accuracy_and_macro_f1_beside_the_monitored_metric(store):
    from raycache._train.folder.record import list_runs

    raycache.train({"cache": "toy", "store": {"uri": store}, "head": "mlp", "epochs": 3,
                    "num_workers": 0, "progress": False, "run_name": "listed",
                    "monitor": "val_loss"})
    [run] = [r for r in list_runs(raycache.open_cache("toy", store)) if r.name == "listed"]
    line = run.line().splitlines()[0]
    assert line.index("val_loss ") < line.index(" served") < line.index(", val_acc ")
    assert f", val_acc {run.served['val_acc']:.4f}, val_f1 {run.served['val_f1']:.4f}" in line


def test_the_curves_of_a_one_epoch_run_show_its_points():
    from raycache._train.folder.metrics import curves_figure

    solved = [{"epoch": 1, "train_loss": 0.4, "val_loss": 0.5, "train_acc": 0.9, "val_acc": 0.8}]
    fig = curves_figure(solved)
    heights = sorted(round(bar.get_height(), 4) for ax in fig.axes for bar in ax.patches)
    assert heights == [0.4, 0.5, 0.8, 0.9]  # its four values as bars, not an empty chart
    assert "one epoch" in fig._suptitle.get_text()
