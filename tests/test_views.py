"""Cached augmentation views: config checks, augmentations, fill (text and numbers), training."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import toy_heads
from conftest import separable, toy_fill
from toy_encoders import WORDS, tiny_text_model

import raycache
from raycache import ConfigError
from raycache._cache.columns import views_column
from raycache._fill.augment import AUGMENTS, crop, word_dropout, word_swap
from raycache._fill.config import ViewsConfig
from raycache._fill.plan import load_config as load_fill
from raycache._fill.plan import plan
from raycache._fill.reuse import input_hashes
from raycache._fill.views import make

TEXT_VIEWS = {"count": 3, "seed": 7, "augment": [{"kind": "word_dropout", "p": 0.3},
                                                 {"kind": "word_swap", "swaps": 1}]}
NOISE_VIEWS = {"count": 3, "augment": [{"kind": "gaussian_noise", "std": 0.5}]}


def test_views_config_lists_every_problem(tmp_path):
    bad = {"count": 0, "augment": [{"kind": "blur"}, {"kind": "word_dropout", "q": 1}],
           "encoders": ["nope"]}
    with pytest.raises(ConfigError) as err:
        load_fill(toy_fill(str(tmp_path), str(tmp_path / "s"), views=bad))
    text = str(err.value)
    for part in ("views.count=0", "augment[0].kind='blur'", "augment[1] (word_dropout)",
                 "'q'", "views.encoders: 'nope'"):
        assert part in text


def test_augmentations_are_pure_functions_of_their_generator():
    text = " ".join(WORDS)
    for fn, params in ((word_dropout, {"p": 0.3}), (word_swap, {"swaps": 2}),
                       (crop, {"max_words": 5})):
        one = fn(text, np.random.default_rng(1), **params)
        assert one == fn(text, np.random.default_rng(1), **params)
        assert one != text and one != fn(text, np.random.default_rng(2), **params)
    assert len(crop(text, np.random.default_rng(0), max_words=5).split()) == 5
    assert sorted(word_swap(text, np.random.default_rng(0)).split()) == sorted(text.split())
    assert set(AUGMENTS) >= {"word_dropout", "word_swap", "crop"}


@pytest.fixture(scope="module")
def text_source(tmp_path_factory):
    """A tiny text encoder (hf-text) and 120 sentences of 6 to 12 words."""
    root = tmp_path_factory.mktemp("text")
    model = tiny_text_model(str(root / "model"))
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS, rng.integers(6, 13))) for _ in range(120)]
    pq.write_table(pa.table({"id": [f"t{i:03d}" for i in range(120)], "text": texts,
                             "label": rng.integers(0, 2, 120)}), root / "text.parquet")
    return root, model


def text_fill(root, model, store, **over) -> dict:
    return {"name": "text", "source": {"path": str(root / "text.parquet"), "labels": ["label"]},
            "encoders": [{"name": "t", "kind": "hf-text", "input": "text", "path": model}],
            "store": {"uri": str(store)}, "rows_per_shard": 50, "progress": False,
            "views": TEXT_VIEWS, **over}


def test_text_views_differ_are_reproducible_and_are_the_encoder_on_augmented_text(
        text_source, tmp_path):
    root, model = text_source
    first = raycache.fill(text_fill(root, model, tmp_path / "a"))
    table = first.cache.read_table().sort_by("id")
    clean = np.stack(table.column("t").to_numpy(zero_copy_only=False))
    views = np.stack(table.column(views_column("t")).to_numpy(zero_copy_only=False))
    views = views.reshape(len(clean), 3, -1)
    assert first.cache.manifest.extra["views"]["count"] == 3
    same = np.isclose(views, clean[:, None, :]).all(axis=2)  # a view equal to the clean row
    assert same.mean() < 0.05  # only where no word dropped and the swap swapped equal words
    for a, b in ((0, 1), (0, 2), (1, 2)):
        assert (~np.isclose(views[:, a], views[:, b]).all(axis=1)).mean() > 0.9
    # another fill, cut into other shards, makes the same views: they follow the content (equal
    # up to float noise: other batches pad the token ids to other lengths)
    again = raycache.fill(text_fill(root, model, tmp_path / "b", rows_per_shard=32))
    other = again.cache.read_table().sort_by("id").column(views_column("t"))
    other = np.stack(other.to_numpy(zero_copy_only=False)).reshape(views.shape)
    np.testing.assert_allclose(other, views, atol=1e-5)
    # each view is the encoder's output for that augmented text
    from raycache._encoders import ENCODERS

    cfg = load_fill(text_fill(root, model, tmp_path / "c"))
    texts = pq.read_table(root / "text.parquet").sort_by("id").column("text").combine_chunks()
    augmented = make(texts, input_hashes(texts), cfg.views, "t")
    live = ENCODERS["hf-text"].load(cfg.encoders[0], "cpu").encode(augmented)
    np.testing.assert_allclose(live.reshape(views.shape), views, atol=1e-5)


def test_the_fingerprint_holds_count_seed_and_augment(separable_source, tmp_path):
    def fp(**views) -> str:
        over = {"views": {**NOISE_VIEWS, **views}} if views else {}
        return plan(load_fill(toy_fill(str(separable_source), str(tmp_path), **over))
                    ).fingerprint

    plain = plan(load_fill(toy_fill(str(separable_source), str(tmp_path))))
    assert "views" not in plain.inputs  # caches without views keep their fingerprints
    prints = {plain.fingerprint, fp(count=3), fp(count=4), fp(seed=1),
              fp(augment=[{"kind": "gaussian_noise", "std": 0.2}])}
    assert len(prints) == 5


def test_clean_embeddings_are_reused_and_views_encoded(separable_source, tmp_path):
    store = str(tmp_path / "store")
    plain = raycache.fill(toy_fill(str(separable_source), store))
    views = raycache.fill(toy_fill(str(separable_source), store, views=NOISE_VIEWS))
    assert views.encoded_rows == 600 and views.reused_rows == 0  # the views ran the encoder
    assert views.encoded_by == {"proj": 0}  # and the clean embeddings were all reused
    a, b = (r.cache.read_table(columns=["id", "proj"]).sort_by("id") for r in (plain, views))
    assert a.equals(b)


def seen(train: bool) -> list[torch.Tensor]:
    return [x for training, x in toy_heads.SEEN if training == train]


def train_cfg(store, **over) -> dict:
    return {"cache": "toy", "store": {"uri": str(store)}, "epochs": 3, "batch_size": 1024,
            "head": "toy_heads:seeing_linear", "num_workers": 0, "progress": False, **over}


def test_training_draws_one_view_per_row_per_epoch_and_validates_on_clean(tmp_path):
    pq.write_table(separable(300), tmp_path / "a.parquet")
    store = tmp_path / "store"
    filled = raycache.fill(toy_fill(str(tmp_path / "a.parquet"), str(store), views=NOISE_VIEWS))
    table = filled.cache.read_table()
    clean = np.stack(table.column("proj").to_numpy(zero_copy_only=False))
    views = np.stack(table.column("proj@views").to_numpy(zero_copy_only=False))
    which = {v.tobytes(): (row, k) for row, vs in enumerate(views.reshape(len(clean), 3, -1))
             for k, v in enumerate(vs)}

    def drawn() -> list[dict[int, int]]:
        """Per epoch (one batch each): the view each training row trained on."""
        out = []
        for x in seen(True):
            pairs = [which[r.numpy().tobytes()] for r in x]  # KeyError: not a cached view
            out.append(dict(pairs))
        return out

    toy_heads.SEEN.clear()
    first = raycache.train(train_cfg(store))
    assert first.spec.views == 3 and first.spec.view_encoders == ("proj",)
    epochs = drawn()
    assert len(epochs) == 3 and len(epochs[0]) == first.history[0]["train_rows"]
    changed = np.mean([epochs[0][r] != epochs[1][r] for r in epochs[0]])
    assert 0.4 < changed < 0.9  # about 2/3 of rows change view between epochs, K = 3
    assert {v for e in epochs for v in e.values()} == {0, 1, 2}
    val = {r.numpy().tobytes() for x in seen(False) for r in x}
    assert val and val <= {c.tobytes() for c in clean}  # validation: the clean rows

    toy_heads.SEEN.clear()  # a rerun of the same seed (a new run) draws the same views
    raycache.train(train_cfg(store, run_name="again"))
    assert drawn() == epochs

    toy_heads.SEEN.clear()  # streamed: the same, read piece by piece
    streamed = raycache.train(train_cfg(store, placement="stream", epochs=2, run_name="s"))
    pairs = [which[r.numpy().tobytes()] for x in seen(True) for r in x]
    half = streamed.history[0]["train_rows"]
    assert len(pairs) == 2 * half and dict(pairs[:half]) != dict(pairs[half:])
    assert {r.numpy().tobytes() for x in seen(False) for r in x} <= {c.tobytes() for c in clean}

    toy_heads.SEEN.clear()  # views: false trains on the clean rows
    plain = raycache.train(train_cfg(store, views=False, epochs=1))
    assert plain.spec.views == 0 and plain.spec.run_name != first.spec.run_name
    assert {r.numpy().tobytes() for x in seen(True) for r in x} <= {c.tobytes() for c in clean}


def test_views_true_on_a_cache_without_views_names_the_fix(separable_source, tmp_path):
    raycache.fill(toy_fill(str(separable_source), str(tmp_path / "store")))
    with pytest.raises(ConfigError, match="has no views"):
        raycache.train(train_cfg(tmp_path / "store", views=True))
    assert ViewsConfig(count=2, augment=[{"kind": "crop"}]).problems() == []
