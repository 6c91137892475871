"""A head's spec (raycache._heads.specs): its JSON round trip and version check."""

import json

import pytest
import torch

from raycache import ConfigError
from raycache._heads.specs import HeadSpec, build_head
from tests.train_specs import HEAD


def test_headspec_round_trip_and_version_check():
    assert HeadSpec.from_dict(json.loads(json.dumps(HEAD.to_dict()))) == HEAD
    with pytest.raises(ConfigError, match="format_version=99"):
        HeadSpec.from_dict({**HEAD.to_dict(), "format_version": 99})
    assert build_head(HEAD)(torch.zeros(2, 4)).shape == (2, 3)
