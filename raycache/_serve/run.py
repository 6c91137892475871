"""`raycache.serve`: a head's Ray Serve application built from a ServeConfig and run on the
Ray cluster connected to (an in-process one when none is), replicas sized from the cluster."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycache._core.config import AUTO, load
from raycache._core.extras import need
from raycache._core.trust import Trust
from raycache._serve.config import ServeConfig, limits

if TYPE_CHECKING:
    from raycache._heads.loaded import Head

__all__ = ["application", "build", "check_encoders", "serve", "serve_app"]

FILE_KINDS = frozenset({"hf-text", "hf-image"})
"""Encoder kinds whose `describe` reads the model's files and runs no code of the checkpoint's:
checked in the driver before Ray starts (a torch factory is not run there)."""


def application(cfg: ServeConfig | dict[str, Any] | str | Path) -> Any:
    """The Serve application (not yet running) of a config: one deployment, HeadServer.

    Raises:
        ConfigError: Every problem of the config, each naming its field.
    """
    need("ray.serve", "serving a head")
    from ray import serve

    from raycache._serve.app import HeadServer

    cfg = load(ServeConfig, cfg)
    gpus = _gpus(cfg.num_gpus)
    replicas: dict[str, Any] = ({"num_replicas": "auto", "autoscaling_config": cfg.autoscaling
                                 or None} if cfg.num_replicas == AUTO
                                else {"num_replicas": cfg.num_replicas})
    deployment = serve.deployment(HeadServer, name="head").options(
        ray_actor_options={"num_cpus": cfg.num_cpus, "num_gpus": gpus},
        max_ongoing_requests=max(2 * cfg.max_batch_size, 8), **replicas,
        user_config={"max_batch_size": cfg.max_batch_size,  # a Serve config may retune them
                     "batch_wait_timeout_s": cfg.batch_wait_timeout_s})
    return deployment.bind(cfg.checkpoint, cfg.options, "cuda" if gpus else "cpu",
                           cfg.max_batch_size, cfg.batch_wait_timeout_s, limits(cfg),
                           cfg.route_prefix, cfg.read_uris,
                           trust_code=Trust.of(cfg.trust_code).given(), model=cfg.model)


def serve_app(args: dict[str, Any]) -> Any:
    """The Serve application of a head from a ServeConfig's fields, for a Serve config file.

    Ray Serve calls it for an application whose `import_path` is `raycache:serve_app`, with the
    application's `args` (`serve run config.yaml`, `serve deploy`, a RayService's
    serveConfigV2); nothing runs until Serve deploys what it returns. Arguments given on
    Serve's command line (`serve run raycache:serve_app checkpoint=... max_batch_size=8`)
    arrive as strings: each is read as YAML, as `--set` reads a value, then checked.

    Args:
        args: ServeConfig's fields (`checkpoint` at least), typed or as strings.

    Returns:
        The application, bound but not running.

    Raises:
        ConfigError: Every problem of `args`, each naming its field.

    Example:
        ```python
        app = raycache.serve_app({"checkpoint": run.checkpoint, "num_gpus": 1})
        ```
    """
    return application(typed(args))


def typed(args: dict[str, Any]) -> dict[str, Any]:
    """Builder arguments with each string read as YAML (`8` an int, `true` a bool, `[a.]` a
    list) where its field is not text alone; text fields (the checkpoint, names, the host)
    kept as given. The loader then checks every one, naming the field."""
    import dataclasses
    import typing

    from raycache._core.overrides import yaml_value

    hints = typing.get_type_hints(ServeConfig)
    names = {f.name for f in dataclasses.fields(ServeConfig)}
    return {k: yaml_value(v, f"{k}={v}") if isinstance(v, str) and k in names
            and hints[k] is not str else v for k, v in dict(args).items()}


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
    need("ray.serve", "serving a head")
    import ray
    from ray import serve as ray_serve

    cfg = load(ServeConfig, config)
    from raycache._heads.loaded import load_head

    # a bad checkpoint (or code it names, untrusted) fails here, not in a replica
    head = load_head(cfg.checkpoint, trust_code=cfg.trust_code, **cfg.options)
    check_encoders(head)  # and an encoder its replicas cannot load, before Ray starts
    if not ray.is_initialized():
        from raycache._compute.where import ray_address

        ray.init(address=ray_address(), include_dashboard=False, log_to_driver=False)
    ray_serve.start(http_options={"host": cfg.host, "port": cfg.port})
    ray_serve.run(application(cfg), name=cfg.name, route_prefix=cfg.route_prefix,
                  blocking=blocking)
    return f"http://{cfg.host}:{cfg.port}{cfg.route_prefix.rstrip('/')}/"


def check_encoders(head: Head) -> None:
    """What each replica will load, checked in this process in seconds: every encoder's kind
    registered, and each model folder's files there with the weights the head was trained on.

    Raises:
        EncoderError: An encoder of an unknown kind, or one whose folder or files are missing.
        RaycacheError: head.json records no encoder config, or an encoder's weights differ
            from the ones the head was trained on.
    """
    from raycache._encoders import ENCODERS
    from raycache._errors import EncoderError, RaycacheError

    for c in head.encoder_configs():
        if c.kind not in ENCODERS:
            raise EncoderError(f"encoder {c.name!r}: kind={c.kind!r} in head.json is not an "
                               f"encoder kind ({sorted(ENCODERS)}); serve a checkpoint that "
                               "raycache's training wrote")
        if c.kind not in FILE_KINDS:
            continue
        got = ENCODERS[c.kind].describe(c)["weights_digest"]
        want = head.spec.weights_digests.get(c.name)
        if want and c.name not in head.spec.trainable and got != want:
            raise RaycacheError(
                f"encoder {c.name!r} has weights {got[:12]}, but the head was trained on "
                f"embeddings of weights {want[:12]}; install the model the cache was filled "
                "with, or retrain the head on a fill of this model")


def _gpus(setting: float | str) -> float:
    """GPUs per replica: auto is 1 where the connected cluster has GPUs, else 0."""
    if setting != AUTO:
        return float(setting)
    import ray

    if not ray.is_initialized():
        return 0.0
    return 1.0 if ray.cluster_resources().get("GPU", 0) else 0.0
