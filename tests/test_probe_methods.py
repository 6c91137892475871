"""The probe's methods against references: logreg against scikit-learn's LogisticRegression on
the same rows and C grid, the batched L-BFGS against lone solves, kNN against a brute-force
search, the metrics against scikit-learn's. No cache, no Ray."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from raycache._fit.lbfgs import minimize
from raycache._probe.config import KnnConfig, LogregConfig
from raycache._probe.knn import fit as knn_fit
from raycache._probe.knn import neighbours
from raycache._probe.logreg import fit as logreg_fit
from raycache._probe.logreg import objective, solve
from raycache._probe.metrics import confusion, per_class, scores

pytestmark = pytest.mark.timeout(120)

GRID = [1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0, 3.0, 10.0]


def blobs(n: int = 1500, d: int = 24, k: int = 4, noise: float = 2.5, seed: int = 0):
    """Overlapping classes (accuracy well below 1, so the C grid matters)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 1, (k, d))
    y = rng.integers(0, k, n)
    x = (centers[y] + rng.normal(0, noise, (n, d))).astype(np.float32)
    cut = int(n * 0.75)
    return x[:cut], y[:cut], x[cut:], y[cut:]


class _Spec:
    """What kNN reads of a head spec: the number of classes."""

    def __init__(self, k):
        self.num_classes, self.class_names = k, ()


def test_logreg_matches_scikit_learn_on_the_same_rows_and_grid():
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y, xv, yv = blobs()
    x = x * np.linspace(0.2, 5, x.shape[1]).astype(np.float32) + 3  # features of other scales
    xv = xv * np.linspace(0.2, 5, x.shape[1]).astype(np.float32) + 3
    w, b, iters = solve(torch.from_numpy(x), torch.from_numpy(y), 4, GRID, 1000, 1e-6)
    ours, theirs = [], []
    for i, c in enumerate(GRID):
        ref = make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=2000, tol=1e-8))
        ref.fit(x, y)
        pred = (torch.from_numpy(xv) @ w[i] + b[i]).argmax(1).numpy()
        ours.append(float((pred == yv).mean()))
        theirs.append(float((ref.predict(xv) == yv).mean()))
        # the same minimiser: C means scikit-learn's C on standardised features, and the
        # solution comes back for the raw ones
        scaler, lr = ref[0], ref[1]
        coef = lr.coef_ / scaler.scale_
        intercept = lr.intercept_ - coef @ scaler.mean_
        scale = np.abs(coef).max()
        assert np.abs(w[i].numpy().T - coef).max() <= 0.02 * scale, c
        assert np.abs(b[i].numpy() - intercept).max() <= 0.02 * max(1.0, np.abs(intercept).max()), c
    assert np.allclose(ours, theirs, atol=0.005), (ours, theirs)
    assert max(ours) >= max(theirs) - 0.005
    assert len(set(theirs)) > 1  # the grid matters on these rows: the test can tell them apart
    assert bool((iters < 1000).all())  # every C converged


def test_every_c_solved_together_equals_each_solved_alone():
    x, y, _, _ = blobs(n=600, d=8, k=3)
    xt, yt = torch.from_numpy(x).double(), torch.from_numpy(y)
    cs = [0.01, 1.0, 100.0]
    w, b, _ = solve(xt, yt, 3, cs, 2000, 1e-9)
    for i, c in enumerate(cs):
        wi, bi, _ = solve(xt, yt, 3, [c], 2000, 1e-9)
        assert torch.allclose(w[i], wi[0], atol=1e-5) and torch.allclose(b[i], bi[0], atol=1e-5)


def test_the_batched_lbfgs_stops_each_problem_on_its_own():
    # quadratics 0.5 * a * ||x - 1||^2 of very different curvature: each solved to its tolerance
    a = torch.tensor([1e-3, 1.0, 1e3], dtype=torch.float64)

    def f(p):
        return 0.5 * a * ((p - 1) ** 2).sum(1), a[:, None] * (p - 1)

    out = minimize(f, torch.zeros(3, 5, dtype=torch.float64), 200, gtol=1e-10)
    assert torch.allclose(out.params, torch.ones(3, 5, dtype=torch.float64), atol=1e-6)
    assert bool((out.iterations < 200).all())


def test_the_objective_gradient_is_the_autograd_gradient():
    x, y, _, _ = blobs(n=50, d=5, k=3)
    xt, yt = torch.from_numpy(x).double(), torch.from_numpy(y)
    f = objective(xt, yt, 3, [0.1, 10.0])
    p = torch.randn(2, 5 * 3 + 3, dtype=torch.float64, requires_grad=True)
    loss, grad = f(p.detach())
    f(p)[0].sum().backward()  # analytic in f, but the loss is differentiable too
    assert torch.allclose(grad, p.grad, atol=1e-10)


def test_logreg_fit_gives_one_candidate_per_c_with_its_head_weights():
    import dataclasses

    from raycache._heads.specs import HeadSpec, build_head

    x, y, xv, yv = blobs(n=400, d=6, k=3)
    spec = HeadSpec(head="mlp", in_dim=6, num_classes=3, hidden=(8,), dropout=0.1,
                    encoders=("e",), label="y", cache="c", fingerprint="f")
    data = SimpleNamespace(x_train=x, y_train=y, x_val=xv, y_val=yv, spec=spec)
    out = logreg_fit(data, SimpleNamespace(logreg=LogregConfig(C=[0.1, 1.0])), "cpu")
    assert [c.setting["C"] for c in out] == [0.1, 1.0]
    for c in out:
        assert c.spec == dataclasses.replace(spec, head="linear", hidden=(), dropout=0.0)
        head = build_head(c.spec)
        head.load_state_dict(c.weights)  # the linear head's own parameter names and shapes
        with torch.no_grad():
            pred = head(torch.from_numpy(xv)).argmax(1).numpy()
        assert np.array_equal(pred, c.pred)


def brute_force(queries, bank, labels, k, classes, metric, temperature):
    """Every similarity at once in float64, sorted: the reference search and vote."""
    q, b = queries.astype(np.float64), bank.astype(np.float64)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
    sims = q @ b.T
    order = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(sims, order, 1)
    votes = np.zeros((len(q), classes))
    w = np.exp((top - top[:, :1]) / temperature)
    for i in range(len(q)):
        np.add.at(votes[i], labels[order[i]], w[i])
    return order, votes.argmax(1)


@pytest.mark.parametrize("metric", ["cosine", "dot"])
def test_knn_equals_brute_force(metric):
    x, y, xv, yv = blobs(n=1300, d=16, k=5, noise=1.5, seed=3)
    if metric == "dot":
        x, xv = x * 0.05, xv * 0.05  # dot similarities of a size exp(s / 0.07) can take
    cfg = SimpleNamespace(knn=KnnConfig(k=[1, 10, 20], metric=metric, block_rows=97))
    data = SimpleNamespace(x_train=x, y_train=y, x_val=xv, y_val=yv, spec=_Spec(5))
    got = {c.setting["k"]: c.pred for c in knn_fit(data, cfg, "cpu")}
    for k in (1, 10, 20):
        order, want = brute_force(xv, x, y, k, 5, metric, 0.07)
        assert np.array_equal(got[k], want), (metric, k, int((got[k] != want).sum()))
    q = torch.from_numpy(xv)
    bank = torch.from_numpy(x)
    if metric == "cosine":
        unit = torch.nn.functional.normalize
        q, bank = unit(q, dim=1), unit(bank, dim=1)
    _, ids = neighbours(q, bank, 20, block_rows=97)
    order, _ = brute_force(xv, x, y, 20, 5, metric, 0.07)
    assert np.array_equal(ids.numpy(), order)  # the very neighbours, in order
    assert len({tuple(c) for c in (got[1], got[10], got[20])}) > 1  # k changes the votes


def test_knn_with_k_above_the_training_rows_uses_them_all():
    x, y, xv, yv = blobs(n=40, d=4, k=2, noise=0.5)
    cfg = SimpleNamespace(knn=KnnConfig(k=[100], block_rows=7))
    data = SimpleNamespace(x_train=x, y_train=y, x_val=xv, y_val=yv, spec=_Spec(2))
    [c] = knn_fit(data, cfg, "cpu")
    _, want = brute_force(xv, x, y, len(x), 2, "cosine", 0.07)
    assert np.array_equal(c.pred, want)


@pytest.mark.filterwarnings("ignore:y_pred contains classes not in y_true")  # on purpose
def test_metrics_equal_scikit_learn_with_an_absent_and_a_never_predicted_class():
    from sklearn.metrics import (
        accuracy_score,
        balanced_accuracy_score,
        f1_score,
        precision_recall_fscore_support,
    )

    rng = np.random.default_rng(1)
    y = rng.integers(0, 4, 300)  # class 4 never occurs
    pred = np.where(rng.random(300) < 0.6, y, rng.integers(0, 5, 300))
    pred[pred == 2] = 1  # class 2 is never predicted
    conf = confusion(y, pred, 5)
    got = scores(conf)
    assert got["val_acc"] == pytest.approx(accuracy_score(y, pred))
    assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro",
                                                     zero_division=0))
    assert got["balanced_acc"] == pytest.approx(balanced_accuracy_score(y, pred))
    names = ["a", "b", "c", "d", "e"]
    rows = per_class(conf, names)
    p, r, f, s = precision_recall_fscore_support(y, pred, labels=range(5), zero_division=0)
    assert list(rows) == names
    for i, n in enumerate(names):
        assert rows[n] == pytest.approx({"precision": p[i], "recall": r[i], "f1": f[i],
                                         "support": s[i]})


def test_logreg_on_shares_standardises_every_share_alike_and_solves_what_one_process_solves():
    """One meaning of C on Ray too: the workers' moment sums added up standardise each share
    (raycache._probe.on_ray.logreg), and the solution mapped back to the raw features is the
    in-process solve's."""
    from raycache._fit.lbfgs import minimize
    from raycache._fit.logreg import penalty, standardizer, to_raw
    from raycache._probe.worker import PartWorker

    x, y, _, _ = blobs(n=400, d=6, k=3)
    x = x * np.array([0.1, 1, 3, 10, 0.5, 2], dtype=np.float32) + 4
    shares = [PartWorker(), PartWorker()]
    for share, (lo, hi) in zip(shares, ((0, 90), (90, 300)), strict=True):
        share.rows["e"] = (x[lo:hi], y[lo:hi], x[:0], y[:0])
    cs, n = [0.1, 10.0], 300
    scale = standardizer(sum(s.logreg_sums("e") for s in shares))
    torch.testing.assert_close(scale[0], torch.from_numpy(x).mean(0))
    torch.testing.assert_close(scale[1], torch.from_numpy(x).std(0, correction=0))

    def f(params):
        parts = [s.logreg_term("e", params, 3, len(cs), n, scale) for s in shares]
        more = penalty(params, 6, 3, cs, n)
        return parts[0][0] + parts[1][0] + more[0], parts[0][1] + parts[1][1] + more[1]

    out = minimize(f, torch.zeros(len(cs), 6 * 3 + 3), 500, 1e-6, ftol=0.0)
    w, b = to_raw(out.params[:, :18].view(2, 6, 3), out.params[:, 18:], *scale)
    want_w, want_b, _ = solve(torch.from_numpy(x), torch.from_numpy(y), 3, cs, 500, 1e-6)
    gap = (w - want_w).abs().max()
    assert gap <= 5e-3 * want_w.abs().max(), float(gap)
    assert (b - want_b).abs().max() <= 5e-3 * max(1.0, float(want_b.abs().max()))
