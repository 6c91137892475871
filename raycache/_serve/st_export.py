"""A trained head written out as a sentence-transformers folder: its encoder's model files,
Pooling and Normalize as the fill ran them, then one Dense module per linear layer of the head,
and the label names in config_sentence_transformers.json (under "raycache")."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raycache._encoders.st_folder import POOLING_KEYS
from raycache._errors import RaycacheError

if TYPE_CHECKING:
    from torch import nn

    from raycache._heads.loaded import Head

__all__ = ["ST_FILES", "export_head"]

ST_FILES = {"modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
            "README.md", ".gitattributes"}
"""The encoder folder's own sentence-transformers files: replaced by the export's."""
IDENTITY = "torch.nn.modules.linear.Identity"
GELU = "torch.nn.modules.activation.GELU"


def export_head(checkpoint: str, output: str, overwrite: bool = False, *,
                trust_code: bool | Sequence[str] = False, **options: Any) -> str:
    """Write a trained head as a sentence-transformers folder: `SentenceTransformer(output)`
    then encodes as the head does (a classifier's logits, a similarity head's embeddings).

    Args:
        checkpoint: The head's checkpoint folder (path or URI), e.g. `TrainResult.checkpoint`.
        output: A local folder to write (created; it must not exist unless `overwrite`).
        overwrite: Replace an existing `output`.
        trust_code: Let head.json name code to run (see `load_head`): True for any, or the
            allowed prefixes of factory paths.
        **options: fsspec storage options for reading the checkpoint.

    Returns:
        The folder written. Its config_sentence_transformers.json holds, under "raycache", the
        label, its class names in logit order, the objective, the cache's fingerprint and the
        precision the fill ran the encoder in (the folder loads in float32).

    Raises:
        RaycacheError: The head is not one encoder of kind hf-text, trains an encoder, or has
            layers other than Linear, GELU and Dropout (families linear, mlp, widening); or
            `output` exists.

    Example:
        ```python
        folder = raycache.export_head(run.checkpoint, "exported")
        SentenceTransformer(folder).encode(["Return the cosine of x."]).argmax(1)
        ```
    """
    from raycache._heads.loaded import load_head

    head = load_head(checkpoint, trust_code=trust_code, **options)
    encoder = _one_text_encoder(head)
    denses = _denses(head)
    out = Path(output)
    if out.exists():
        if not overwrite:
            raise RaycacheError(f"output {output!r} exists; pass overwrite=True (CLI: "
                                "--overwrite) to replace it, or name a new folder")
        shutil.rmtree(out)
    from raycache._encoders.hf_text import settings

    s = settings(encoder)
    head.encoders()  # the encoder's weights checked against the ones the head was trained on
    out.mkdir(parents=True)
    for f in s.folder.iterdir():
        if f.is_file() and f.name not in ST_FILES:
            shutil.copy2(f, out / f.name)
    dim = int(json.loads((s.folder / "config.json").read_text())["hidden_size"])
    modules = [("", "Transformer"), ("1_Pooling", "Pooling")]
    _write(out / "sentence_bert_config.json",
           {"max_seq_length": s.max_length, "do_lower_case": s.lowercase})
    _write(out / "1_Pooling" / "config.json",  # the flags every sentence-transformers reads
           {"word_embedding_dimension": dim,
            **{key: mode == s.pooling for key, mode in POOLING_KEYS.items()}})
    if s.normalize:
        modules.append(("2_Normalize", "Normalize"))
        (out / "2_Normalize").mkdir()
    for linear, activation in denses:
        path = f"{len(modules)}_Dense"
        _dense(out / path, linear, activation)
        modules.append((path, "Dense"))
    if head.spec.normalize:
        path = f"{len(modules)}_Normalize"
        (out / path).mkdir()
        modules.append((path, "Normalize"))
    _write(out / "modules.json",
           [{"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{t}"}
            for i, (p, t) in enumerate(modules)])
    _write(out / "config_sentence_transformers.json",
           {"raycache": {**_about(head), "precision": encoder.precision}})
    return str(out)


def _one_text_encoder(head: Head) -> Any:
    """The head's one frozen hf-text encoder config, or the reason it cannot be exported."""
    spec = head.spec
    if spec.trainable:
        raise RaycacheError(f"this head trains encoders {list(spec.trainable)} with it; a "
                            "sentence-transformers export takes a head on one frozen encoder")
    configs = head.encoder_configs()
    if len(configs) != 1 or configs[0].kind != "hf-text":
        kinds = [f"{c.name} ({c.kind})" for c in configs]
        raise RaycacheError(f"this head reads encoders {kinds}; a sentence-transformers export "
                            "takes a head on exactly one encoder of kind hf-text")
    return configs[0]


def _denses(head: Head) -> list[tuple[nn.Linear, str]]:
    """The head's layers as (Linear, the activation after it): Dropout is dropped (eval mode)."""
    from torch import nn

    from raycache._heads.modules import Normalized, Standardized

    model = head.model.inner if isinstance(head.model, Normalized) else head.model
    inputs = model if isinstance(model, Standardized) else None
    model = model.inner if inputs is not None else model
    layers = list(model) if isinstance(model, nn.Sequential) else [model]
    out: list[tuple[nn.Linear, str]] = []
    for layer in layers:
        if isinstance(layer, nn.Dropout):
            continue
        if isinstance(layer, nn.Linear):
            out.append((layer, IDENTITY))
        elif isinstance(layer, nn.GELU) and out and out[-1][1] == IDENTITY \
                and layer.approximate == "none":
            out[-1] = (out[-1][0], GELU)
        else:
            raise RaycacheError(
                f"head family {head.spec.head!r} has a {type(layer).__name__} layer, which "
                "sentence-transformers' Dense cannot hold; export heads of families linear, "
                "mlp or widening (Linear, GELU, Dropout), or serve this one with raycache.serve")
    if inputs is not None and out:
        out[0] = (_folded(out[0][0], inputs), out[0][1])
    return out


def _folded(linear: nn.Linear, inputs: Any) -> nn.Linear:
    """A Linear on raw inputs equal to `linear` on inputs standardised by `inputs`
    (Standardized): W / scale, and b - (W / scale) @ mean."""
    import torch
    from torch import nn

    folded = nn.Linear(linear.in_features, linear.out_features, bias=True)
    with torch.no_grad():
        w = linear.weight.double() / inputs.scale.double()
        b = (linear.bias.double() if linear.bias is not None else 0.0) - w @ inputs.mean.double()
        folded.weight.copy_(w)
        folded.bias.copy_(b)
    return folded


def _dense(folder: Path, linear: nn.Linear, activation: str) -> None:
    from raycache._heads.weights import encode

    folder.mkdir()
    _write(folder / "config.json", {"in_features": linear.in_features,
                                    "out_features": linear.out_features,
                                    "bias": linear.bias is not None,
                                    "activation_function": activation})
    (folder / "model.safetensors").write_bytes(encode(
        {f"linear.{k}": v for k, v in linear.state_dict().items()}))


def _about(head: Head) -> dict[str, Any]:
    spec = head.spec
    return {"objective": spec.objective, "label": spec.label,
            "classes": list(spec.class_names) or list(range(spec.num_classes))
            if spec.objective == "classification" else [],
            "cache": spec.cache, "fingerprint": spec.fingerprint, "head": spec.head}


def _write(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2) + "\n")
