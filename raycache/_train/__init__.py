"""TRAIN: a config planned against the registries and the cache, the Ray Train driver, the
per-worker loop, objectives, sweeps and checkpoints."""
