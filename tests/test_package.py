"""The package root and the light fill stages import neither Ray nor torch, so `raycache ls`
starts fast and Ray's read and write workers stay small."""

import subprocess
import sys

import raycache


def test_import_is_light_and_exports_the_sdk():
    code = ("import sys, raycache, raycache._fill.shards, raycache._source.files; "
            "print(sorted(m for m in ('torch', 'ray', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    for name in raycache.__all__:
        assert getattr(raycache, name) is not None
    assert callable(raycache.fill) and callable(raycache.train)
