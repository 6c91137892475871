"""A head folder, a manifest and a checkpoint's state.pt are data: code they name (a torch
encoder's factory, a head family that is not registered) runs only when the caller trusts it,
and a planted pickle is never unpickled. Each plant would leave a marker file if it ran."""

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import toy_heads

import raycache
from raycache._cli import main
from raycache._core.trust import Trust
from raycache._encoders.config import EncoderConfig
from raycache._heads.joint import build_model
from raycache._heads.specs import HeadSpec
from raycache._heads.weights import encode
from raycache._train.folder import checkpoints as ckpt
from tests.conftest import killed_after_epoch, separable, toy_fill

pytestmark = pytest.mark.timeout(300)

PLANTED = "toy_encoders:touching_projection"


def head_folder(root: Path, trainable: bool = False) -> Path:
    """A linear head on the toy projection (frozen, or trained with the head), written as a
    training run writes one: head.json and head.safetensors."""
    enc = EncoderConfig("proj", "torch", "features", factory="toy_encoders:projection",
                        kwargs={"in_dim": 8, "out_dim": 16}, trainable=trainable)
    spec = HeadSpec(head="linear", in_dim=16, num_classes=3, hidden=(), dropout=0.0,
                    encoders=("proj",), label="label", cache="toy", fingerprint="f" * 16,
                    encoder_configs={"proj": dataclasses.asdict(enc)},
                    trainable=("proj",) if trainable else ())
    folder = root / ("joint" if trainable else "head")
    folder.mkdir()
    (folder / "head.safetensors").write_bytes(encode(build_model(spec).state_dict()))
    (folder / "head.json").write_text(json.dumps({"head": spec.to_dict(), "key": "id"}))
    return folder


def plant(folder: Path, marker: Path, *, family: str | None = None) -> None:
    """Edit head.json as an attacker would: the encoder's factory (or the head family) now
    names code that leaves `marker` when it runs."""
    saved = json.loads((folder / "head.json").read_text())
    if family:
        saved["head"]["head"] = family
    else:
        enc = saved["head"]["encoder_configs"]["proj"]
        enc["factory"], enc["kwargs"] = PLANTED, {**enc["kwargs"], "marker": str(marker)}
    (folder / "head.json").write_text(json.dumps(saved))


def test_a_trainable_encoders_planted_factory_is_refused_by_load_head(tmp_path):
    folder, marker = head_folder(tmp_path, trainable=True), tmp_path / "ran"
    raycache.load_head(str(folder), trust_code=["toy_encoders:projection"])
    plant(folder, marker)
    with pytest.raises(raycache.UntrustedCode, match="head.encoder_configs.proj.factory") as exc:
        raycache.load_head(str(folder))
    assert exc.value.value == PLANTED and "trust_code=True" in str(exc.value)
    assert PLANTED in str(exc.value) and "--trust-code" in str(exc.value)
    with pytest.raises(raycache.UntrustedCode):
        raycache.load_head(str(folder), trust_code=["toy"])  # "toy" is no prefix of toy_encoders
    assert not marker.exists()
    head = raycache.load_head(str(folder), trust_code=["toy_encoders:touching_projection"])
    assert marker.exists() and head.spec.trainable == ("proj",)
    marker.unlink()
    raycache.load_head(str(folder), trust_code=True)
    assert marker.exists()


def test_an_unregistered_head_family_runs_only_when_trusted(tmp_path, monkeypatch):
    folder, marker = head_folder(tmp_path), tmp_path / "ran"
    monkeypatch.setattr(toy_heads, "MARKER", str(marker))
    plant(folder, marker, family="toy_heads:touching_linear")
    with pytest.raises(raycache.UntrustedCode, match=r"head.json: head.head") as exc:
        raycache.load_head(str(folder))
    assert "toy_heads:touching_linear" in str(exc.value) and "HEADS" in str(exc.value)
    assert not marker.exists()
    raycache.load_head(str(folder), trust_code=["toy_heads"])
    assert marker.exists()


def test_a_frozen_encoders_planted_factory_never_runs_in_predict_evaluate_or_serve(tmp_path):
    folder, marker = head_folder(tmp_path), tmp_path / "ran"
    plant(folder, marker)
    table = separable(n=30)
    pq.write_table(table, tmp_path / "rows.parquet")
    head = raycache.load_head(str(folder))  # nothing built yet: the frozen encoder is lazy
    assert head.predict_embeddings(np.zeros((2, 16), np.float32)).shape == (2,)
    with pytest.raises(raycache.UntrustedCode, match="proj.factory"):
        head.predict({"features": table.column("features").to_pylist()[:2]})
    with pytest.raises(raycache.UntrustedCode):
        raycache.predict_file({"checkpoint": str(folder), "input": str(tmp_path / "rows.parquet"),
                               "output": str(tmp_path / "out.parquet"), "in_process": True,
                               "progress": False})
    with pytest.raises(raycache.UntrustedCode):
        raycache.evaluate(str(folder), table)
    with pytest.raises(raycache.UntrustedCode):  # refused before Ray or Serve start
        raycache.serve({"checkpoint": str(folder)})
    args = ["evaluate", "--checkpoint", str(folder), "--input", str(tmp_path / "rows.parquet")]
    assert main(args) == 3
    assert not marker.exists()
    assert main([*args, "--trust-code"]) == 0
    assert marker.exists()


def planted_store(tmp_path: Path, trainable: bool = False) -> tuple[str, Path]:
    """A toy cache filled in this process whose manifest then names a planted factory (a
    frozen one's also lacks a shard: repair has work to do)."""
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(separable(n=300), source / "a.parquet")
    cfg = toy_fill(str(source), str(tmp_path / "store"), in_process=True)
    cfg["encoders"][0]["trainable"] = trainable
    result = raycache.fill(cfg)
    marker = tmp_path / "ran"
    path = Path(result.cache.store.root) / result.cache.dir / "manifest.json"
    saved = json.loads(path.read_text())
    enc = saved["extra"]["encoder_configs"]["proj"]
    enc["factory"], enc["kwargs"] = PLANTED, {**enc["kwargs"], "marker": str(marker)}
    path.write_text(json.dumps(saved))
    for shard in [] if trainable else (path.parent / "shards").glob("*.parquet"):
        shard.unlink()
        break
    return str(tmp_path / "store"), marker


def test_repair_and_compact_never_run_a_manifests_planted_factory(tmp_path):
    store, marker = planted_store(tmp_path)
    with pytest.raises(raycache.UntrustedCode, match="manifest.json: encoder_configs.proj"):
        raycache.repair("toy", store, in_process=True)
    with pytest.raises(raycache.UntrustedCode, match="manifest.json: encoder_configs.proj"):
        raycache.compact("toy", store)
    assert main(["repair", "toy", "--store", store]) == 3
    assert not marker.exists()
    with pytest.raises(raycache.RaycacheError):  # trusted, it runs (and the cache is not its)
        raycache.repair("toy", store, in_process=True, trust_code=True)
    assert marker.exists()


def test_training_never_runs_a_manifests_planted_trainable_factory(tmp_path):
    store, marker = planted_store(tmp_path, trainable=True)
    config = {"cache": "toy", "store": {"uri": store}, "epochs": 1, "num_workers": 0,
              "progress": False, "verify": False}
    with pytest.raises(raycache.UntrustedCode, match="manifest.json: encoder_configs.proj"):
        raycache.train(config)
    assert not marker.exists()


class Planted:
    """Unpickled, opens (creates) the file it names: what a planted state.pt would run."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_a_planted_state_pt_is_refused_not_unpickled(tmp_path):
    marker, proof = tmp_path / "ran", tmp_path / "would-run"
    buf = io.BytesIO()
    torch.save({"model": {}, "rng": Planted(proof)}, buf)
    torch.load(io.BytesIO(buf.getvalue()), weights_only=False)  # what reading it whole does
    assert proof.exists()
    buf = io.BytesIO()
    torch.save({"model": {}, "rng": Planted(marker)}, buf)
    with pytest.raises(raycache.RaycacheError, match="Start the run afresh"):
        ckpt.load_state(io.BytesIO(buf.getvalue()), "run/checkpoint_000001/state.pt")
    assert not marker.exists()


def test_state_pt_holds_plain_values_and_old_numpy_states_still_load(tmp_path):
    state = {"rng": ckpt.rng_state(), "metric": np.float64(0.5), "rows": np.arange(3)}
    ckpt.write_folder(str(tmp_path), HeadSpec("linear", 2, 2, (), 0.0, ("e",), "y", "c", "f"),
                      {}, state, {})
    torch.load(tmp_path / ckpt.STATE, weights_only=True)  # no allow-list needed
    back = ckpt.load_state(io.BytesIO((tmp_path / ckpt.STATE).read_bytes()), "state.pt")
    assert back["metric"] == 0.5 and back["rows"].tolist() == [0, 1, 2]
    np.random.seed(7)
    ckpt.set_rng_state(ckpt.load_state(io.BytesIO(_saved({"rng": ckpt.rng_state()})), "s")["rng"])
    assert np.random.rand() == np.random.RandomState(7).rand()
    old = {"numpy": np.random.get_state(), "metric": np.float32(1.5)}  # what 0.3 saved
    assert ckpt.load_state(io.BytesIO(_saved(old)), "old")["metric"] == 1.5


def _saved(value) -> bytes:
    buf = io.BytesIO()
    torch.save(value, buf)
    return buf.getvalue()


def test_resuming_a_run_whose_state_pt_was_planted_fails_cleanly(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    pq.write_table(separable(n=300), source / "a.parquet")
    raycache.fill(toy_fill(str(source), str(tmp_path / "store"), in_process=True))
    config = {"cache": "toy", "store": {"uri": str(tmp_path / "store")}, "run_name": "cut",
              "epochs": 3, "num_workers": 0, "progress": False, "optim": {"solver": "gradient"},
              "checkpoints": {"every": 1, "max_failures": 0}}
    with killed_after_epoch(1), pytest.raises(Exception, match="killed after epoch 1"):
        raycache.train(config)
    states = sorted((tmp_path / "store").rglob(f"checkpoint_*/{ckpt.STATE}"))
    assert states, "the killed run left its checkpoint"
    marker = tmp_path / "ran"
    states[-1].write_bytes(_saved({"model": {}, "rng": Planted(marker)}))
    with pytest.raises(raycache.RaycacheError, match="weights-only read refuses it"):
        raycache.train(config)
    assert not marker.exists()


def test_trust_prefixes_name_modules_not_spellings():
    trust = Trust.of(["mypkg.", "other"])
    assert trust.allows("mypkg.enc:make") and trust.allows("other:f")
    assert trust.allows("other.sub:f") and not trust.allows("otherwise:f")
    assert not Trust.of(False).allows("subprocess:run") and Trust.of(True).allows("x:y")
    with pytest.raises(raycache.ConfigError, match="trust_code"):
        raycache.predict_file({"checkpoint": "c", "input": "i", "output": "o",
                               "trust_code": [""]})
