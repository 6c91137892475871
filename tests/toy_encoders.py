"""Small deterministic torch encoders for tests: fixed-seed projections, importable by workers."""

import threading

import torch


def projection(in_dim: int = 8, out_dim: int = 16, seed: int = 0) -> torch.nn.Module:
    """A fixed random linear projection followed by tanh (same weights on every call)."""
    g = torch.Generator().manual_seed(seed)
    layer = torch.nn.Linear(in_dim, out_dim)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(out_dim, in_dim, generator=g) / in_dim**0.5)
        layer.bias.zero_()
    return torch.nn.Sequential(layer, torch.nn.Tanh())


def unseeded(in_dim: int = 8, out_dim: int = 16) -> torch.nn.Module:
    """Random weights on every call: a fill must refuse it rather than mix two models."""
    return torch.nn.Linear(in_dim, out_dim)


class _Slow(torch.nn.Module):
    """Sleeps before each forward pass, so a test can act while a fill is under way."""

    def __init__(self, inner: torch.nn.Module, delay: float):
        super().__init__()
        self.inner, self.delay = inner, delay

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import time

        time.sleep(self.delay)
        return self.inner(x)


def slow_projection(in_dim: int = 8, out_dim: int = 16, delay: float = 0.5) -> torch.nn.Module:
    """projection() that takes `delay` seconds per forward pass."""
    return _Slow(projection(in_dim, out_dim), delay)


GATE = threading.Event()
"""gated_projection's forward passes after the first `after` wait for this (a test sets it)."""
FAIL_AT: int | None = None
"""flaky_projection raises on its forward pass number FAIL_AT (counting from 1); None: never."""


class _Gated(torch.nn.Module):
    """Waits for GATE (at most `timeout` seconds) before every forward pass after the first
    `after`, so a test can hold a fill open until something else has happened."""

    def __init__(self, inner: torch.nn.Module, after: int, timeout: float):
        super().__init__()
        self.inner, self.after, self.timeout, self.calls = inner, after, timeout, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > self.after:
            GATE.wait(self.timeout)
        return self.inner(x)


def gated_projection(in_dim: int = 8, out_dim: int = 16, after: int = 1,
                     timeout: float = 30.0) -> torch.nn.Module:
    """projection() whose forward passes after the first `after` wait for GATE."""
    return _Gated(projection(in_dim, out_dim), after, timeout)


class _Flaky(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if FAIL_AT is not None and self.calls >= FAIL_AT:
            raise RuntimeError(f"toy encoder failed on purpose at call {self.calls}")
        return self.inner(x)


def flaky_projection(in_dim: int = 8, out_dim: int = 16) -> torch.nn.Module:
    """projection() that raises on forward pass FAIL_AT (a module setting, so that a resumed
    fill has the same fingerprint)."""
    return _Flaky(projection(in_dim, out_dim))


WORDS = (
    "the", "a", "one", "two", "red", "blue", "green", "cat", "dog", "bird", "runs", "sits",
    "sees", "big", "small", "old", "new", "fast", "slow", "near", "far", "over", "under",
    "this", "that", "and",
)


def tiny_text_model(folder: str) -> str:
    """Write a tiny hf-text model folder (a word-level tokenizer over WORDS and a one-layer
    BERT with seeded weights): a real text encoder that loads in well under a second."""
    from pathlib import Path

    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import BertConfig, BertModel

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {w: i for i, w in enumerate([*special, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    Path(folder).mkdir(parents=True, exist_ok=True)
    tok.save(f"{folder}/tokenizer.json")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    return folder
def small_mlp(in_dim: int = 8, out_dim: int = 8, seed: int = 1) -> torch.nn.Module:
    """A seeded two-layer MLP: the trainable encoder of the tests (its weights should move)."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(in_dim, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, out_dim))


def scaled_projection(in_dim: int = 8, out_dim: int = 16, scale: float = 1e6
                      ) -> torch.nn.Module:
    """projection()'s linear layer times `scale`, no tanh: outputs beyond float16's range."""
    layer = projection(in_dim, out_dim)[0]
    with torch.no_grad():
        layer.weight.mul_(scale)
    return layer


POISON = True
"""nan_projection gives NaN for its marked rows while this is true (a module setting, so that a
later fill has the same fingerprint)."""


class _NaNFor(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module, above: float):
        super().__init__()
        self.inner, self.above = inner, above

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.inner(x)
        if POISON:
            out[x[:, 0] > self.above] = float("nan")
        return out


def nan_projection(in_dim: int = 8, out_dim: int = 16, above: float = 3.0) -> torch.nn.Module:
    """projection() that returns NaN for rows whose first feature is above `above`."""
    return _NaNFor(projection(in_dim, out_dim), above)


def touching_projection(marker: str, in_dim: int = 8, out_dim: int = 16) -> torch.nn.Module:
    """projection() after leaving a file at `marker`: a factory planted in a head folder or a
    manifest, whose file shows that it ran."""
    from pathlib import Path

    Path(marker).touch()
    return projection(in_dim, out_dim)
