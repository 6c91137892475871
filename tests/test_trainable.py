"""A frozen and a trainable encoder together: the fill caches one and keeps the other's input;
training runs the trainable one live beside the cached column, and the head predicts with it."""

from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import toy_encoders
from safetensors.torch import load_file

import raycache
from raycache import ConfigError, RaycacheError
from raycache._cache.columns import input_column
from raycache._fill.plan import load_config as load_fill
from raycache._train.driver.checks import load_config as load_train
from tests.conftest import separable, toy_fill

LIVE = {"name": "live", "kind": "torch", "input": "features", "factory": "toy_encoders:small_mlp",
        "kwargs": {"in_dim": 8, "out_dim": 8}, "trainable": True}


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[str, raycache.Cache]:
    """A 300-row cache of one frozen projection and one trainable MLP, filled in-process."""
    root = tmp_path_factory.mktemp("trainable")
    (root / "source").mkdir()
    pq.write_table(separable(300), root / "source" / "a.parquet")
    cfg = toy_fill(str(root / "source"), str(root / "store"))
    cfg["encoders"].append(LIVE)
    result = raycache.fill(cfg)
    return str(root / "store"), result.cache


def train_cfg(store: str, **over) -> dict:
    return {"cache": "toy", "store": {"uri": store}, "epochs": 3, "lr": 0.02, "batch_size": 32,
            "num_workers": 0, "progress": False, **over}


def test_fill_keeps_the_trainable_input_and_encodes_only_the_frozen(filled):
    _, cache = filled
    m = cache.manifest
    live, proj = m.encoder("live"), m.encoder("proj")
    assert live.trainable and live.column == input_column("live") and not live.weights_digest
    assert not proj.trainable and proj.dim == 16 and proj.weights_digest
    assert m.inputs["encoders"]["live"]["weights_digest"] == ""  # they change: not hashed
    table = cache.read_table()
    assert "live" not in table.column_names  # no embeddings of the trainable encoder
    source = separable(300).sort_by("id")
    table = table.sort_by("id")
    assert table.column(live.column).to_pylist() == source.column("features").to_pylist()


def test_training_moves_the_trainable_weights_and_reads_the_frozen_from_the_cache(
        filled, monkeypatch):
    store, _ = filled

    def never(*args, **kwargs):
        raise AssertionError("the frozen encoder was loaded during training")

    monkeypatch.setattr(toy_encoders, "projection", never)  # the frozen one's factory
    # val_loss falls every epoch here, so the served epoch is the last, whose state.pt it checks
    run = raycache.train(train_cfg(store, encoder_lr=0.05, run_name="joint", monitor="val_loss"))
    assert run.spec.head.trainable == ("live",) and run.spec.head.in_dim == 16 + 8
    losses = [h["train_loss"] for h in run.history]
    assert losses[-1] < losses[0]
    torch.manual_seed(0)
    start = toy_encoders.small_mlp(8, 8).state_dict()
    state = torch.load(Path(run.checkpoint) / "state.pt", weights_only=False)
    trained = {k.removeprefix("encoders.live.inner."): v for k, v in state["model"].items()
               if k.startswith("encoders.live.")}
    assert set(trained) == set(start)
    assert any(not torch.equal(trained[k], start[k]) for k in start)
    groups = state["optimizer"]["param_groups"]
    assert [g.get("peak_lr") for g in groups] == [None, 0.05]  # the encoder's own lr

    head = run.load_head()  # the head with its trained encoder, and the frozen one, live
    monkeypatch.undo()
    source = separable(300)
    predicted = head.predict({"features": source.column("features").to_pylist()})
    assert (predicted == source.column("label").to_numpy()).mean() > 0.9
    assert torch.equal(head.model.state_dict()["encoders.live.inner.0.weight"],
                       state["model"]["encoders.live.inner.0.weight"])
    with pytest.raises(RaycacheError, match="needs their inputs.*predict"):
        head.predict_embeddings(torch.zeros(2, 24))
    out = Path(store).parent / "pred.parquet"  # the predict job runs the trained encoder too
    pq.write_table(source, Path(store).parent / "in.parquet")
    raycache.predict_file({"checkpoint": run.checkpoint, "input": str(out.parent / "in.parquet"),
                           "output": str(out), "in_process": True, "progress": False})
    assert pq.read_table(out).column("prediction").to_pylist() == predicted.tolist()


def test_streamed_placement_carries_the_trainable_input(filled):
    store, _ = filled
    run = raycache.train(train_cfg(store, placement="stream", epochs=2, run_name="streamed"))
    assert run.spec.placement == "stream" and run.history[-1]["train_rows"] > 0
    assert run.history[-1]["val_acc"] > 0.5


def test_a_head_on_the_trainable_encoder_alone(filled):
    store, _ = filled
    run = raycache.train(train_cfg(store, encoders=["live"], epochs=2, run_name="alone"))
    assert run.spec.head.in_dim == 8 and run.spec.head.frozen == ()
    assert run.history[-1]["train_rows"] > 0 and run.history[-1]["val_acc"] > 0.5


def test_trainable_settings_are_checked_with_clear_errors(filled, tmp_path):
    store, _ = filled
    clash = toy_fill(str(tmp_path), str(tmp_path))
    clash["source"]["labels"] = ["live__input"]
    clash["encoders"].append(LIVE)
    with pytest.raises(ConfigError, match="input column 'live__input' clashes"):
        load_fill(clash)
    with pytest.raises(ConfigError, match=r"encoder_lr=0\.0: must be > 0"):
        load_train(train_cfg(store, encoder_lr=0.0))
    with pytest.raises(ConfigError, match="encoder_lr=0.001: cache toy has no trainable"):
        raycache.train(train_cfg(store, encoders=["proj"], encoder_lr=1e-3))
    with pytest.raises(ConfigError, match=r"sweep: trainable encoders \['live'\]"):
        raycache.train(train_cfg(store, sweep={"lr": [0.01, 0.02]}))



def test_trainable_hf_text_starts_where_the_frozen_one_is(minilm_dir):
    """The live hf-text module, before training, gives the frozen encoder's embeddings from the
    token ids a fill keeps (so training starts from the pre-trained model), with gradients."""
    import pyarrow as pa

    from raycache._encoders import ENCODERS
    from raycache._encoders.config import EncoderConfig

    cfg = EncoderConfig(name="t", kind="hf-text", input="text", path=str(minilm_dir),
                        trainable=True)
    texts = pa.array(["a short one", "a somewhat longer sentence about caches", "x"])
    family = ENCODERS["hf-text"]
    ids = family.prepare(cfg)(texts)
    rows = family.rows(cfg, ids)
    assert rows.shape[0] == 3 and (rows[2] == -1).sum() > 0  # padded with -1
    live = family.live(cfg)
    out = live(torch.from_numpy(rows))
    frozen = family.load(EncoderConfig(name="f", kind="hf-text", input="text",
                                       path=str(minilm_dir)), "cpu").encode(texts)
    torch.testing.assert_close(out.detach(), torch.from_numpy(frozen), atol=1e-5, rtol=1e-4)
    out.sum().backward()
    assert any(p.grad is not None for p in live.parameters())


def test_a_resumed_run_restores_the_encoder_and_ends_where_an_unbroken_one_does(filled):
    """A run stopped after epoch 2 (its last checkpoint and finished status gone) resumes from
    epoch 2, the trainable encoder's weights and optimizer state included, and ends with the
    weights of the run that never stopped."""
    import json
    import shutil

    store, _ = filled
    cfg = train_cfg(store, checkpoint_every=1, run_name="resume", encoder_lr=0.05)
    whole = raycache.train(cfg)
    final = load_file(Path(whole.checkpoint) / "head.safetensors")
    shutil.rmtree(whole.checkpoint)  # as if the driver died during epoch 3
    record = Path(whole.spec.run_dir) / "run.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "status": "running"}))
    resumed = raycache.train(cfg)
    assert resumed.resumed_from == [2] and len(resumed.history) == 3
    again = load_file(Path(resumed.checkpoint) / "head.safetensors")
    encoder = [k for k in final if k.startswith("encoders.live.")]
    assert encoder and all(torch.equal(final[k], again[k]) for k in final)
