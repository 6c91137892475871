"""Frozen-feature protocols: which encoder, which head (`raycache.probe`); the METHODS
registry, each method a function (Features, ProbeConfig, device, Training) -> list of
Candidates (the Training handed in, raycache._probe.training, trains linear and mlp)."""

from raycache._probe import heads, knn, logreg

METHODS = {
    "logreg": logreg.fit,
    "knn": knn.fit,
    "linear": heads.fit_linear,
    "mlp": heads.fit_mlp,
}

__all__ = ["METHODS"]
