"""The run folder as the driver reads it (raycache._train.folder.run_folder): its record and
newest checkpoint read once per train, its checkpoints listed again only after training."""

import pyarrow.parquet as pq
import pytest

import raycache
from raycache._train.folder import run_folder
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("run_folder")
    (root / "source").mkdir()
    pq.write_table(separable(n=60), root / "source" / "a.parquet")
    raycache.fill(toy_fill(str(root / "source"), str(root / "store"), rows_per_shard=30,
                           in_process=True))
    return str(root / "store")


def test_a_train_lists_its_checkpoints_once_before_and_once_after_training(store, monkeypatch):
    listed = []
    real = run_folder.latest
    monkeypatch.setattr(run_folder, "latest", lambda s, path: listed.append(path) or real(s, path))
    cfg = {"cache": "toy", "store": {"uri": store}, "num_workers": 0, "loop": {"epochs": 1},
           "progress": False}
    first = raycache.train(cfg)
    assert len(listed) == 2  # opened, then after the checkpoints training wrote
    listed.clear()
    again = raycache.train(cfg)  # finished before: returned from what the folder held
    assert len(listed) == 1 and again.checkpoint == first.checkpoint


def test_a_folder_opened_empty_resumes_from_nothing(tmp_path):
    from raycache._cache.store import Store

    store = Store(str(tmp_path))
    folder = run_folder.RunFolder.open(store, store.path("toy", "fp", "runs", "r"))
    assert folder.record is None and folder.latest is None
    assert not folder.finished and folder.epochs_done == 0
