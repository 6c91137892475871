"""A solved linear head acts on its own warnings: a C chosen at the grid's edge widens the grid
(a decade at a time, bounded), a solve stopped by the iteration cap continues from where it
stopped, and the summary says what was widened and continued. In-process: no Ray."""

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._fit.logreg import GRID, MAX_ITER, WIDEN_DECADES
from raycache._train.console import solved_text
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def solved(tmp_path_factory) -> raycache.TrainResult:
    """A solved head on well separated rows: every C scores every held-out row right, so the
    lower held-out loss (a weaker penalty) picks C, past the default grid's largest."""
    root = tmp_path_factory.mktemp("solved-search")
    (root / "src").mkdir()
    pq.write_table(separable(n=300), root / "src" / "a.parquet")
    raycache.fill(toy_fill(str(root / "src"), str(root / "store"), in_process=True))
    return raycache.train({"cache": "toy", "store": {"uri": str(root / "store")},
                           "num_workers": 0, "progress": False})


def test_a_c_at_the_grids_edge_widens_the_grid(solved):
    m = solved.history[-1]
    assert m["solver"] == "lbfgs"
    assert m["l2_C"] > max(GRID)  # before: never past the grid's 10
    assert f"C={m['l2_C']:g}: acc" in m["l2_grid"]
    assert f"widened to C={m['l2_widened']}" in solved.summary()


def test_a_capped_solve_continues_from_where_it_stopped():
    import torch

    from raycache._fit.logreg import moment_sums, objective, solve, standardizer, to_standard
    from raycache._train.worker.l2_search import finish

    torch.manual_seed(0)
    y = torch.randint(0, 3, (300,))
    x = torch.randn(3, 16)[y] + torch.randn(300, 16)
    for j in range(16):  # one far outlier a feature: standardised, ill-conditioned
        x[j, j] = 1e4 * (j % 4 + 1)
    scale = standardizer(moment_sums(x))
    capped = solve(x, y, 3, [100.0], MAX_ITER, 1e-4, None, scale)
    assert int(capped[2][0]) == MAX_ITER  # the set hits the cap
    w, b, iterations, still = finish(x, y, 3, 100.0, None, scale)
    assert iterations > MAX_ITER and not still  # before: it stopped there

    def loss(w, b):
        mean, sd = scale
        ws, bs = to_standard(w[None], b[None], mean, sd)
        f = objective((x - mean) / sd, y, 3, [100.0])
        return float(f(torch.cat([ws.reshape(1, -1), bs], 1))[0][0])

    assert loss(w, b) < loss(capped[0][0], capped[1][0])


def test_widening_follows_the_best_past_either_edge_within_its_bound():
    import torch

    from raycache._train.worker.l2_search import Grid, widen

    def run(best: float) -> Grid:
        grid = Grid(list(GRID), [], [])
        for c in GRID:
            grid.scores.append({"val_acc": -abs(torch.tensor(c).log10() - best).item()})
            grid.solutions.append((torch.zeros(1), torch.zeros(1)))

        def solve_one(c, start):
            return torch.full((1,), c), torch.zeros(1)

        def score(w, b):
            return {"val_acc": -abs(w.log10() - best).item()}

        def choose(scores):
            return max(range(len(scores)), key=lambda i: scores[i]["val_acc"])

        pick = widen(grid, choose(grid.scores), solve_one, score, choose)
        grid.cs = [grid.cs[pick], *grid.cs]  # the pick first, for the asserts
        return grid

    assert run(-2.0).cs[0] == pytest.approx(0.01) and run(-2.0).widened == pytest.approx(
        [0.01, 0.001])  # past the best by one: it is no longer on the edge
    assert run(2.0).cs[0] == pytest.approx(100.0)
    assert run(0.0).widened == []  # inside the grid: nothing widened
    far = run(9.0)
    assert len(far.widened) == WIDEN_DECADES and far.cs[0] == pytest.approx(10.0 ** 4)


def test_the_summary_says_what_was_widened_and_continued():
    record = {"solver": "lbfgs", "train_rows": 100, "l2_chosen_on": 20, "l2_C": 1000.0,
              "l2_widened": "100, 1000, 10000", "lbfgs_iterations": 240, "lbfgs_capped": False}
    text = solved_text([record], 0)
    assert "the grid (0.1, 1, 10) widened to C=100, 1000, 10000" in text
    assert "continued past the 100-iteration cap" in text
    assert "still at its edge" not in text and "before converging" not in text
    edge = solved_text([{**record, "l2_C": 10000.0, "lbfgs_capped": True,
                         "lbfgs_iterations": 500}], 0)
    assert "C is still at its edge after 3 decades (the bound)" in edge
    assert "stopped at the 500-iteration bound before converging" in edge
    quiet = solved_text([{**record, "l2_C": 1.0, "l2_widened": "", "lbfgs_iterations": 40}], 0)
    assert quiet.endswith("40 iterations)")
