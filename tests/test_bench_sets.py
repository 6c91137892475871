"""bench/defaults.py's wordnet set, read from a small WordNet dict/ folder written here."""

import importlib.util

import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT

LICENCE = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
LINES = {  # offset, lexicographer file, then the synset's words and pointers, | its gloss
    "noun": ["00001740 03 n 01 entity 0 000 | that which is perceived or known  "],
    "verb": ["00001740 29 v 01 breathe 0 000 02 + 08 00 | draw air into, and expel out of, "
             "the lungs; \"I can breathe better now\"  "],
    "adj": ["00001740 00 a 01 able 0 000 | (usually followed by `to') having the necessary "
            "means  "],
    "adv": ["00001740 02 r 01 barely 0 000 | only a very short time before  "],
}


def defaults_bench():
    spec = importlib.util.spec_from_file_location("bench_defaults", ROOT / "bench" / "defaults.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_wordnet_set_is_every_synsets_gloss_labelled_by_its_lexicographer_file(tmp_path):
    folder = tmp_path / "dict"
    folder.mkdir()
    for pos, lines in LINES.items():
        (folder / f"data.{pos}").write_text(LICENCE + "\n".join(lines) + "\n")
    cfg = defaults_bench().wordnet(tmp_path, folder)
    table = pq.read_table(cfg["source"]["path"]).to_pydict()
    # one offset in all four files: four rows, four keys
    assert table["id"] == ["n00001740", "v00001740", "a00001740", "r00001740"]
    assert table["label"] == ["noun.Tops", "verb.body", "adj.all", "adv.all"]
    assert table["text"][1] == ('draw air into, and expel out of, the lungs; '
                                '"I can breathe better now"')
    assert cfg["source"]["labels"] == ["label"] and cfg["encoders"][0]["input"] == "text"


def test_a_wordnet_folder_without_its_data_files_is_refused_naming_the_file(tmp_path):
    (tmp_path / "dict").mkdir()
    with pytest.raises(SystemExit, match=r"no data\.noun in it; expected WordNet's dict/"):
        defaults_bench().wordnet(tmp_path, tmp_path / "dict")
