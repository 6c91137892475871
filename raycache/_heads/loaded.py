"""Load a trained head from its checkpoint folder alone (no Ray, no cache): head.json checked
as data, then its weights (the head in use: raycache._heads.head)."""

from __future__ import annotations

import json
import pickle
from collections.abc import Sequence
from typing import Any

from safetensors import SafetensorError

from raycache._cache.store import Store
from raycache._core.trust import Trust
from raycache._encoders.trusted import check_encoders
from raycache._errors import RaycacheError
from raycache._heads.head import LIVE_ROWS, Head
from raycache._heads.joint import build_model
from raycache._heads.specs import HEAD_CONFIG, HeadSpec, check_family
from raycache._heads.weights import WEIGHT_FILES, decode, read

__all__ = ["LIVE_ROWS", "Head", "load_head"]


def load_head(checkpoint: str, *, trust_code: bool | Sequence[str] = False,
              **options: Any) -> Head:
    """Load a trained head from its checkpoint folder alone: no Ray, no cache.

    Args:
        checkpoint: The checkpoint folder holding head.json and head.safetensors (or the
            head.pt of an older raycache) (a path or any fsspec URI), e.g.
            `TrainResult.checkpoint`.
        trust_code: head.json is data: code it names (a head family or an encoder's factory,
            "module:function") runs only where this allows it (True: any; a list: those
            under its prefixes, ["mypkg."]) or this process's own fill or train config named it.
        **options: fsspec storage options, e.g. client_kwargs, credentials plain or sealed
            (head.json records none: they come from the caller or the environment).

    Returns:
        The head, on the CPU (`Head.to` moves it), ready to predict.

    Raises:
        RaycacheError: The folder holds no head.json or weights, or they are unreadable.
        UntrustedCode: head.json names code (its head family, an encoder's factory) that
            trust_code does not allow; nothing of it was imported.
        StoreError: The folder's store cannot be reached (StoreUnavailable: after retries).

    Example:
        ```python
        head = raycache.load_head(run.checkpoint)
        head.predict(["Return the cosine of x."])
        ```
    """
    folder, trust = Store(checkpoint, options), Trust.of(trust_code)
    where = f"{checkpoint}/{HEAD_CONFIG}"
    try:
        text = folder.read_bytes(folder.path(HEAD_CONFIG))
        name, blob = read(folder)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise RaycacheError(f"{checkpoint!r} is not a head checkpoint ({exc}); pass a "
                            f"checkpoint folder holding head.json and {WEIGHT_FILES[0]}, e.g. "
                            "TrainResult.checkpoint") from exc
    try:
        saved = json.loads(text)
        spec = HeadSpec.from_dict(saved["head"], where)
        check_family(spec, trust, where)  # code it names is refused before it is imported
        check_encoders({e: c for e, c in spec.encoder_configs.items() if e in spec.trainable},
                       trust, f"{where}: head.encoder_configs")  # the frozen: when built
        model = build_model(spec)
        model.load_state_dict(decode(blob, name))
    except (ValueError, KeyError, TypeError, RuntimeError, EOFError, pickle.UnpicklingError,
            SafetensorError) as exc:
        raise RaycacheError(f"checkpoint {checkpoint!r} is unreadable ({type(exc).__name__}: "
                            f"{exc}); its head.json and {name} must be the ones a training "
                            "run wrote: point at a complete checkpoint_* folder") from exc
    return Head(model.eval(), spec, {k: v for k, v in saved.items() if k != "head"},
                _trust=trust.given())
