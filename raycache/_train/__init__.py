"""TRAIN: a config planned against the registries and the cache (`driver/`, on the driver),
the per-worker loop (`worker/`, in each Ray Train worker), and what both share: the configs,
the WorkerSpec, `data/`, `objectives/`, `sweep/`, optimizers and checkpoints."""
