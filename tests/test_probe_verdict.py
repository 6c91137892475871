"""The probe's verdict weighs every head it ran: the lexical line compares the best encoder row
of any method and says what might close the gap (an mlp where none ran, a larger encoder, more
rows); methods left out run an mlp too where it costs little. In-process: no Ray."""

import numpy as np
import pytest

from raycache._probe.config import MLP_AUTO_SIZE, ProbeConfig, default_methods
from raycache._probe.result import LEXICAL, Outcome, ProbeResult

pytestmark = pytest.mark.timeout(120)


def outcome(encoder: str, method: str, acc: float, rows: int = 4383) -> Outcome:
    return Outcome(encoder, method, {}, {"val_acc": acc, "macro_f1": acc, "balanced_acc": acc},
                   np.eye(2), ["a", "b"], rows, 5, 0.1)


def result(*outcomes: Outcome) -> ProbeResult:
    return ProbeResult(ProbeConfig(caches=["x"]), list(outcomes), "val_acc")


def test_the_lexical_line_compares_the_best_encoder_row_of_any_method():
    mlp = result(outcome("minilm", "logreg", 0.7340), outcome("minilm", "mlp", 0.7677),
                 outcome("minilm", "knn", 0.70), outcome("tfidf[text]", LEXICAL, 0.7711))
    note = mlp.lexical_note()
    assert "beats the best encoder row, minilm (mlp), by 0.3 points of val_acc" in note
    assert "an mlp" not in note  # it ran
    assert "a larger encoder than minilm" in note and "more labelled rows (4,383" in note
    assert note in mlp.summary()
    over = result(outcome("minilm", "logreg", 0.7340), outcome("minilm", "mlp", 0.7800),
                  outcome("tfidf[text]", LEXICAL, 0.7711))
    assert over.lexical_note() == ""  # the mlp beats it: no line, whatever logreg scored


def test_an_mlp_not_run_is_named_as_what_to_try():
    note = result(outcome("minilm", "logreg", 0.7340), outcome("minilm", "knn", 0.70),
                  outcome("tfidf[text]", LEXICAL, 0.7711)).lexical_note()
    assert "beats the best encoder row, minilm (logreg), by 3.7 points" in note
    assert "try an mlp on minilm (methods: [knn, logreg, mlp]; it was not run)" in note
    assert "may not fit" not in note


def test_methods_left_out_add_an_mlp_where_it_costs_little():
    assert default_methods(6000, 384) == ["logreg", "knn", "mlp"]
    assert default_methods(117_000, 384) == ["logreg", "knn"]
    assert default_methods(MLP_AUTO_SIZE // 16, 16) == ["logreg", "knn", "mlp"]
    assert default_methods(MLP_AUTO_SIZE // 16 + 1, 16) == ["logreg", "knn"]
    assert ProbeConfig(caches=["x"]).methods is None
    assert ProbeConfig(caches=["x"], methods=[]).problems() == [
        "methods=[]: name at least one, e.g. [logreg, knn]"]


def test_the_added_mlp_has_a_smaller_epoch_cap_and_a_named_mlp_keeps_the_default():
    from raycache._core.config import load
    from raycache._probe.config import ProbeHeadsConfig
    from raycache._probe.heads import ADDED_EPOCHS, train_config
    from raycache._train.config import TrainConfig

    def loop(**over):
        out = train_config(ProbeConfig(caches=["x"], **over), "x", None, "e", "mlp")
        return load(TrainConfig, out).loop

    full = TrainConfig(cache="x").loop.max_epochs
    assert full > ADDED_EPOCHS
    assert loop().max_epochs == ADDED_EPOCHS  # methods left out: the added mlp, capped
    assert loop(methods=["mlp"]).max_epochs == full  # named: its sweep, the full cap
    given = loop(mlp=ProbeHeadsConfig(train={"loop": {"max_epochs": 40}}))
    assert given.max_epochs == 40  # the user's loop settings win
    late = loop(mlp=ProbeHeadsConfig(train={"loop": {"min_epochs": ADDED_EPOCHS + 5}}))
    assert late.max_epochs == late.min_epochs == ADDED_EPOCHS + 5  # never under min_epochs
