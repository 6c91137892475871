"""A first day's mistakes meet a named error with the fix, never a raw traceback: a JSONL file
that is not UTF-8, a store URI of an unknown scheme, a model folder that does not exist, a
config typo ("did you mean"), and an encoder input column that is not in the source."""

import pyarrow.parquet as pq
import pytest
from toy_encoders import tiny_text_model

import raycache
from raycache import ConfigError, EncoderError, SourceError, StoreError
from tests.conftest import separable, toy_fill

pytestmark = pytest.mark.timeout(300)


def text_fill(source, store, model: str) -> dict:
    return {"name": "text", "source": {"path": str(source), "labels": ["label"]},
            "encoders": [{"name": "t", "kind": "hf-text", "input": "text", "path": model}],
            "store": {"uri": str(store)}, "progress": False, "in_process": True}


def test_a_jsonl_file_that_is_not_utf8_is_named_with_its_row(tmp_path):
    model = tiny_text_model(str(tmp_path / "model"))
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_bytes(
        b'{"id": "a", "text": "this that", "label": 0}\n'
        b'{"id": "b", "text": "caf\xe9 and", "label": 1}\n')
    with pytest.raises(SourceError, match=r"a\.jsonl': column 'text' holds text that is not "
                                          r"UTF-8 \(data row 2: b'caf\\xe9 and'\).*iconv"):
        raycache.fill(text_fill(tmp_path / "src", tmp_path / "store", model))
    assert not list((tmp_path / "store").rglob("manifest.json"))


def test_a_store_uri_of_an_unknown_scheme_is_named(tmp_path):
    with pytest.raises(StoreError, match=r"unknown scheme 's4'.*check the spelling"):
        raycache.open_cache("docs", "s4://bucket/prefix")


def test_a_model_folder_that_does_not_exist_says_so(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.jsonl").write_text('{"id": "a", "text": "this", "label": 0}\n')
    with pytest.raises(EncoderError, match=r"path='.*no-such-model' does not exist"):
        raycache.fill(text_fill(tmp_path / "src", tmp_path / "store",
                                str(tmp_path / "no-such-model")))


@pytest.mark.parametrize(("wrong", "meant"), [
    ({"epoch": 5}, "epoch: unknown field (did you mean loop.epochs?)"),
    ({"loop": {"epoch": 5}}, "loop.epoch: unknown field (did you mean loop.epochs?)"),
    ({"optim": {"lrr": 0.1}}, "optim.lrr: unknown field (did you mean optim.lr?)"),
])
def test_a_config_typo_says_what_was_meant(wrong, meant):
    from raycache._train.driver.checks import load_config

    with pytest.raises(ConfigError) as err:
        load_config({"cache": "docs", **wrong})
    assert meant in str(err.value)


def test_a_field_far_from_every_name_gets_no_guess():
    from raycache._train.driver.checks import load_config

    with pytest.raises(ConfigError) as err:
        load_config({"cache": "docs", "zzzqqq": 1})
    assert "zzzqqq: unknown field; expected one of" in str(err.value)


def test_a_wrong_encoder_input_names_the_encoders_field(tmp_path):
    (tmp_path / "src").mkdir()
    pq.write_table(separable(n=20), tmp_path / "src" / "a.parquet")
    cfg = toy_fill(str(tmp_path / "src"), str(tmp_path / "store"), in_process=True)
    cfg["encoders"][0]["input"] = "featurez"
    with pytest.raises(ConfigError, match=r"encoders\[0\]\.input \(encoder 'proj'\) column "
                                          r"'featurez' is not in .*a\.parquet"):
        raycache.fill(cfg)


def test_a_filesystem_registered_at_run_time_is_a_known_scheme():
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    from raycache._cache.store import Store

    class Registered(MemoryFileSystem):
        protocol = "rcregistered"

    fsspec.register_implementation("rcregistered", Registered, clobber=True)
    assert Store("rcregistered://bucket/prefix").uri == "rcregistered://bucket/prefix"


@pytest.mark.parametrize(("command", "said"), [
    ("fill", "Nothing was committed; the shards finished before the interrupt are kept, and "
             "running the same command again resumes from them."),
    ("train", "Running the same command again resumes the run from its last checkpoint"),
])
def test_ctrl_c_is_one_line_that_says_running_again_resumes(tmp_path, capsys, monkeypatch,
                                                           command, said):
    import raycache._fill.run as fill_run
    import raycache._train.driver.run as train_run
    from raycache._cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(fill_run if command == "fill" else train_run, command, interrupted)
    config = tmp_path / "c.yaml"
    config.write_text("{}\n")
    assert main([command, "--config", str(config)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == f"raycache {command}: interrupted. {said}" or (
        err.startswith(f"raycache {command}: interrupted. ") and said in err)
    assert "Traceback" not in err
