"""`raycache.serve`: a head's Ray Serve application built from a ServeConfig and run on the
Ray cluster connected to (an in-process one when none is), replicas sized from the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raycache._core.config import AUTO, load
from raycache._core.trust import Trust
from raycache._serve.config import ServeConfig

__all__ = ["application", "build", "serve", "serve_app"]


def application(cfg: ServeConfig | dict[str, Any] | str | Path) -> Any:
    """The Serve application (not yet running) of a config: one deployment, HeadServer.

    Raises:
        ConfigError: Every problem of the config, each naming its field.
    """
    from ray import serve

    from raycache._serve.app import HeadServer

    cfg = load(ServeConfig, cfg)
    gpus = _gpus(cfg.num_gpus)
    replicas: dict[str, Any] = ({"num_replicas": "auto", "autoscaling_config": cfg.autoscaling
                                 or None} if cfg.num_replicas == AUTO
                                else {"num_replicas": cfg.num_replicas})
    deployment = serve.deployment(HeadServer, name="head").options(
        ray_actor_options={"num_cpus": cfg.num_cpus, "num_gpus": gpus},
        max_ongoing_requests=max(2 * cfg.max_batch_size, 8), **replicas)
    return deployment.bind(cfg.checkpoint, cfg.options, "cuda" if gpus else "cpu",
                           cfg.max_batch_size, cfg.batch_wait_timeout_s, cfg.max_texts,
                           cfg.route_prefix, cfg.read_uris,
                           trust_code=Trust.of(cfg.trust_code).given())


def serve_app(args: dict[str, Any]) -> Any:
    """The Serve application of a head from a ServeConfig's fields, for a Serve config file.

    Ray Serve calls it for an application whose `import_path` is `raycache:serve_app`, with the
    application's `args` (`serve run config.yaml`, `serve deploy`, a RayService's
    serveConfigV2); nothing runs until Serve deploys what it returns.

    Args:
        args: ServeConfig's fields (`checkpoint` at least).

    Returns:
        The application, bound but not running.

    Raises:
        ConfigError: Every problem of `args`, each naming its field.

    Example:
        ```python
        app = raycache.serve_app({"checkpoint": run.checkpoint, "num_gpus": 1})
        ```
    """
    return application(dict(args))


build = serve_app
"""The builder's earlier path (`raycache._serve.run:build`), kept for deployed configs."""


def serve(config: ServeConfig | dict[str, Any] | str | Path, blocking: bool = False) -> str:
    """Serve a trained head over HTTP: its frozen encoders and the head in Ray Serve replicas.

    Args:
        config: A ServeConfig, or the same as a dict or a YAML file.
        blocking: Wait (until Ctrl-C) instead of returning once the application runs.

    Returns:
        The application's URL: POST `{"texts": [...]}` to it for `{"labels": [...],
        "probabilities": [[...]]}`; GET `<url>health` and `<url>metadata`.

    Raises:
        ConfigError: Every problem of the config, each naming its field.
        RaycacheError: The checkpoint is not a head, or its encoders cannot be loaded.

    Example:
        ```python
        url = raycache.serve({"checkpoint": run.checkpoint, "port": 8000})
        requests.post(url, json={"texts": ["Return the cosine of x."]}).json()
        ```
    """
    import ray
    from ray import serve as ray_serve

    cfg = load(ServeConfig, config)
    from raycache._heads.loaded import load_head

    # a bad checkpoint (or code it names, untrusted) fails here, not in a replica
    load_head(cfg.checkpoint, trust_code=cfg.trust_code, **cfg.options).encoder_configs()
    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    ray_serve.start(http_options={"host": cfg.host, "port": cfg.port})
    ray_serve.run(application(cfg), name=cfg.name, route_prefix=cfg.route_prefix,
                  blocking=blocking)
    return f"http://{cfg.host}:{cfg.port}{cfg.route_prefix.rstrip('/')}/"


def _gpus(setting: float | str) -> float:
    """GPUs per replica: auto is 1 where the connected cluster has GPUs, else 0."""
    if setting != AUTO:
        return float(setting)
    import ray

    if not ray.is_initialized():
        return 0.0
    return 1.0 if ray.cluster_resources().get("GPU", 0) else 0.0
