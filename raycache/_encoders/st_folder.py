"""What a sentence-transformers model folder declares (modules.json, its Pooling and Normalize
modules, sentence_bert_config.json), read so that raycache encodes as that library would."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from raycache._errors import EncoderError

__all__ = ["Declared", "declared"]

POOLING_KEYS = {
    "pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
    "pooling_mode_lasttoken": "lasttoken",
}
RUNS = ("Transformer", "Pooling", "Normalize")
"""The module types raycache runs; a folder with others (Dense, ...) is refused."""


@dataclass(frozen=True)
class Declared:
    """A folder's own settings; all None for a plain transformers folder."""

    pooling: str | None = None
    normalize: bool | None = None
    max_length: int | None = None
    lowercase: bool = False


def declared(folder: Path, name: str) -> Declared:
    """The settings a sentence-transformers folder declares (Declared() for other folders)."""
    path = folder / "modules.json"
    if not path.is_file():
        return Declared()
    modules = _json(path, name)
    kinds = {m.get("type", "").rsplit(".", 1)[-1]: m for m in modules}
    others = sorted(set(kinds) - set(RUNS))
    if others:
        raise EncoderError(
            f"encoder {name!r}: {path} lists modules {others}, which raycache does not run (it "
            f"runs {list(RUNS)}); encode such a model with kind: torch and a factory of yours")
    pooling = "mean"
    if "Pooling" in kinds:
        cfg = _json(folder / kinds["Pooling"].get("path", "") / "config.json", name)
        modes = [mode for key, mode in POOLING_KEYS.items() if cfg.get(key)]
        extra = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v
                 and k not in POOLING_KEYS]
        if len(modes) != 1 or extra:
            raise EncoderError(
                f"encoder {name!r}: the Pooling module of {folder} asks for "
                f"{modes + extra or 'no pooling'}; raycache runs exactly one of "
                f"{sorted(set(POOLING_KEYS.values()))}")
        pooling = modes[0]
    bert = folder / "sentence_bert_config.json"
    settings = _json(bert, name) if bert.is_file() else {}
    return Declared(pooling, "Normalize" in kinds, settings.get("max_seq_length"),
                    bool(settings.get("do_lower_case")))


def _json(path: Path, name: str) -> dict | list:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EncoderError(f"encoder {name!r}: cannot read {path}: {exc}; the model folder is "
                           "incomplete or damaged, download it again") from exc
