"""A fill's encoders loaded where they run, each checked against the fingerprint's weights; in a
Ray worker process, kept there for the tasks of every fill that comes (_compute.memo)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from raycache._compute.memo import memo
from raycache._errors import EncoderError

if TYPE_CHECKING:
    from raycache._compute.pool import Pool
    from raycache._encoders import Encoder
    from raycache._encoders.config import EncoderConfig

__all__ = ["load_encoder", "memo_encoder"]


def load_encoder(e: EncoderConfig, digest: str, pool: Pool) -> Encoder:
    """Encoder `e` loaded for `pool`, an EncoderError where its weights are not `digest`'s."""
    from raycache._encoders import ENCODERS

    loaded = ENCODERS[e.kind].load(e, pool.device, pool.batching)
    found = loaded.weights_digest()
    if found != digest:
        raise EncoderError(
            f"encoder {e.name!r} loaded weights {found[:12]} in a fill actor, but the "
            f"fingerprint was computed from {digest[:12]}: its weights differ between loads "
            "(random initialisation?). Load fixed weights, or seed the factory, so every actor "
            "encodes with the same model"
        )
    return loaded


def memo_encoder(e: EncoderConfig, digest: str, pool: Pool) -> Encoder:
    """Encoder `e` as this process loaded it before for the same settings, weights, device and
    batching (a Ray worker process's earlier task or fill), else loaded now and kept."""
    key = (repr(e), digest, pool.device, repr(pool.batching))
    return memo("encoder", key, functools.partial(load_encoder, e, digest, pool))
