"""poolkit.explain: word weights merged from pieces, heads, layers, fold averaging, faithfulness, the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch
from dist_worker import toy_config, toy_data
from tiny_models import tiny_bert_dir
from transformers import AutoModel, AutoTokenizer

from poolkit.cli import main
from poolkit.errors import PoolkitError
from poolkit.explain import Explainer, Explanation, TextExplanation, deletion_curve, explain
from poolkit.explain.faithfulness import delete_words
from poolkit.io import MANIFEST
from poolkit.pooling import build_pooler

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pieces_dir(tmp_path_factory) -> str:
    """The tiny BERT with a '##s' piece: 'cats' is split into 'cat' + '##s'."""
    return tiny_bert_dir(tmp_path_factory.mktemp("pieces"), pieces=("##s",))


@pytest.fixture(scope="module")
def run_dir(model_dir, tmp_path_factory, accelerate_on_one_cpu_thread) -> str:
    """A two-fold `poolkit train` run on the toy good / bad task."""
    from poolkit.training.finetune import fit

    out = tmp_path_factory.mktemp("run") / "run"
    fit(toy_config(model_dir, folds=2, epochs=2), toy_data(), out, progress=False)
    return str(out)


def test_pieces_are_summed_into_their_word_and_special_tokens_stay(pieces_dir):
    # catches a merge that keeps the first piece or averages pieces, and one that drops [CLS] / [SEP]
    item = explain(pieces_dir, ["the cats sat"], pooler="mean")[0]
    assert item.words == ["[CLS]", "the", "cats", "sat", "[SEP]"]
    assert item.spans == [None, (0, 3), (4, 8), (9, 12), None]
    np.testing.assert_allclose(item.weights, [1 / 6, 1 / 6, 2 / 6, 1 / 6, 1 / 6], rtol=1e-6)
    assert item.content_words() == [1, 2, 3]


def test_word_weights_are_the_poolers_own_and_padding_does_not_change_them(model_dir):
    # catches weights read from the wrong row of a padded batch, or shifted by the padding
    texts = ["good", "the big red dog sat on the mat and ran"]
    pooler = build_pooler("attention", 32).eval()
    batched = explain(model_dir, texts, pooler=pooler, batch_size=2)
    alone = [explain(model_dir, [t], pooler=pooler, batch_size=1)[0] for t in texts]
    for got, want in zip(batched.items, alone):
        np.testing.assert_allclose(got.weights, want.weights, atol=1e-6)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    batch = tokenizer([texts[1]], return_tensors="pt")
    with torch.inference_mode():
        states = AutoModel.from_pretrained(model_dir).eval()(**batch).last_hidden_state
        _, weights = pooler(states, batch["attention_mask"], return_weights=True)
    np.testing.assert_allclose(batched[1].weights, weights[0].numpy(), atol=1e-6)  # one piece per word here
    assert batched.meaning.startswith("the pooler's attention weights")


def test_weight_free_poolers_say_what_their_weights_mean(model_dir):
    # catches a cls pooler shown as uniform, and meanings that are all the same text
    cls = explain(model_dir, ["the cat sat"], pooler="cls")
    np.testing.assert_array_equal(cls[0].weights, [1, 0, 0, 0, 0])
    maxed = explain(model_dir, ["the cat sat"], pooler="max")
    assert maxed[0].weights.sum() == pytest.approx(1.0) and len(set(maxed[0].weights.round(4))) > 1
    meanings = {name: explain(model_dir, ["a"], pooler=name).meaning for name in ("mean", "max", "cls")}
    assert "one-hot" in meanings["cls"] and "uniform" in meanings["mean"] and "share" in meanings["max"]
    assert cls[0].prediction is None and cls.task is None  # an encoder + pooler has no head


@pytest.mark.parametrize("spec, labels", [
    ({"name": "multihead_attention", "num_heads": 3}, ["head 1", "head 2", "head 3"]),
    ({"name": "latent", "num_queries": 2, "num_heads": 2},
     ["head 1 query 1", "head 1 query 2", "head 2 query 1", "head 2 query 2"]),
])
def test_multi_head_poolers_give_one_row_per_head_or_query(model_dir, spec, labels):
    # catches rows that are missing, copies of the averaged weights, or labelled in the wrong order
    item = explain(model_dir, ["the big dog ran fast"], pooler=spec)[0]
    assert item.row_labels == labels and item.rows.shape == (len(labels), len(item.words))
    np.testing.assert_allclose(item.rows.mean(axis=0), item.weights, atol=1e-5)
    assert np.abs(item.rows[0] - item.rows[1]).max() > 1e-4
    assert explain(model_dir, ["a dog"], pooler="attention")[0].rows is None


def test_head_rows_are_asked_per_call_so_poolers_running_meanwhile_do_not_leak_in(model_dir):
    # catches capturing the rows through a process-wide hook (patching masking.masked_softmax): another multi-head
    # pooler running during the forward -- as in another thread -- joined the capture and the rows were lost
    from concurrent.futures import ThreadPoolExecutor

    from poolkit.pooling import masking

    spec = {"name": "multihead_attention", "num_heads": 3}
    explainer, other = Explainer(model_dir, spec), build_pooler(spec, 32).eval()
    text = "the big dog ran fast"
    alone = explainer.explain([text])[0]

    def meanwhile(module, args, output) -> None:
        other(output.last_hidden_state)

    hook = explainer.members[0].encoder.register_forward_hook(meanwhile)
    try:
        busy = explainer.explain([text])[0]
    finally:
        hook.remove()
    np.testing.assert_allclose(busy.rows, alone.rows, atol=1e-6)
    softmax = masking.masked_softmax
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda _: explainer.explain([text])[0].rows, range(8)))
    for rows in found:
        np.testing.assert_allclose(rows, alone.rows, atol=1e-6)
    assert masking.masked_softmax is softmax


def test_layer_poolers_show_their_layer_weights(model_dir):
    # catches layer weights lost, unnormalised, or labelled with the wrong hidden-state index
    pooler = build_pooler({"name": "weighted_layer", "layer_start": 1, "token_pooler": "mean"}, 32, 2)
    with torch.no_grad():
        pooler.layer_weights.copy_(torch.tensor([1.0, 3.0]))
    item = explain(model_dir, ["the dog"], pooler=pooler)[0]
    np.testing.assert_allclose(item.layer_weights, [0.25, 0.75], rtol=1e-6)
    assert item.layer_labels == ["layer 1", "layer 2"]


def test_a_run_folder_averages_its_fold_models_and_scores_errors(run_dir):
    # catches explaining the first fold only, and an error that is not 1 - p(target)
    from poolkit.training.api import predict

    texts = ["the good dog ran", "a bad cat sat on the mat"]
    both = explain(run_dir, texts, targets=["pos", "neg"])
    folds = [explain(f"{run_dir}/fold_{k}", texts) for k in (0, 1)]
    assert both.n_models == 2 and "2 fold models" in both.source and both.label_names == ["neg", "pos"]
    for k, item in enumerate(both.items):
        np.testing.assert_allclose(item.weights, (folds[0][k].weights + folds[1][k].weights) / 2, atol=1e-6)
        assert item.error == pytest.approx(1 - item.scores[["pos", "neg"][k]])
        assert item.probability == pytest.approx(max(item.scores.values()))
    expected = predict(run_dir, texts, progress=False)
    np.testing.assert_allclose([i.scores["pos"] for i in both.items], expected["prob_pos"], atol=1e-5)
    assert [i.prediction for i in both.items] == list(expected["prediction"])
    with pytest.raises(PoolkitError, match="not one of the model's labels"):
        explain(run_dir, texts, targets=["pos", "maybe"])


def test_targets_are_checked_before_any_text_is_encoded(run_dir, monkeypatch):
    # the README's explain line on a regression run with a text label column ran every text, then ended with
    # "ValueError: could not convert string to float" (issue 33); catches a check made only after the work
    explainer = Explainer(run_dir)
    monkeypatch.setattr(Explainer, "_run", lambda *args, **kwargs: pytest.fail("encoded before checking targets"))
    with pytest.raises(PoolkitError, match="'maybe' is not one of the model's labels"):
        explainer.explain(["a dog", "a cat"], targets=["pos", "maybe"])
    explainer.task = "regression"  # the same check for a regression model's values
    with pytest.raises(PoolkitError, match="the target 'bad' is not a number: check `target_col`"):
        explainer.explain(["a dog", "a cat"], targets=["1.5", "bad"])


def test_explain_refuses_what_it_cannot_explain(model_dir, tmp_path):
    with pytest.raises(PoolkitError, match="no trained model"):
        explain(tmp_path, ["a"])
    with pytest.raises(PoolkitError, match="nothing to explain"):
        explain(model_dir, [], pooler="mean")
    with pytest.raises(PoolkitError, match="no head"):
        Explainer(model_dir, "mean").scores(["a"])


def test_delete_words_removes_the_spans_and_tidies_the_spaces():
    assert delete_words("the cat, sat on mats", [(4, 7), (16, 20)]) == "the , sat on"
    assert delete_words("a b", []) == "a b"


class KeywordModel:
    """A stand-in explainer: p(pos) = 0.9 when the text holds ``keyword``, else 0.1; the weights put ``peak`` on the
    word ``favoured`` and share the rest."""

    task = "classification"

    def __init__(self, favoured: str, keyword: str = "good", peak: float = 0.6):
        self.favoured, self.keyword, self.peak = favoured, keyword, peak

    def scores(self, texts):
        return np.array([[0.1, 0.9] if self.keyword in t.split() else [0.9, 0.1] for t in texts])

    def predicted_score(self, scores):
        return int(np.argmax(scores))

    def explain(self, texts):
        items = []
        for text in texts:
            words, spans, start = text.split(), [], 0
            for word in words:
                start = text.index(word, start)
                spans.append((start, start + len(word)))
                start += len(word)
            rest = (1 - self.peak) / (len(words) - 1)
            weights = np.array([self.peak if w == self.favoured else rest for w in words])
            items.append(TextExplanation(text, words, spans, weights))
        return Explanation(items, {"name": "stub"}, "", "stub", 1, "classification", ["neg", "pos"])


TEXTS = ["the good dog ran fast", "a cat is good and big", "one good two three four five"]


def test_deleting_the_top_word_moves_a_faithful_prediction_more_than_random_words():
    # catches ranking words by ascending weight, and a random baseline that reuses the top words
    curve = deletion_curve(KeywordModel("good"), TEXTS, ks=(1, 2), draws=20, seed=1)
    first = curve["rows"][0]
    assert first["k"] == 1 and first["texts"] == 3
    assert first["top_mean"] == pytest.approx(0.8) and first["top_wins"] == 1.0
    assert 0 < first["random_mean"] < 0.5  # 1 in 5 or 6 random deletions hits the keyword
    unfaithful = deletion_curve(KeywordModel("dog"), TEXTS, ks=(1,), draws=20, seed=1)["rows"][0]
    assert unfaithful["top_mean"] == 0.0 and unfaithful["top_wins"] == 0.0  # weights that miss the keyword
    assert "probability" in curve["measure"]


def test_deletion_curve_skips_texts_too_short_for_k():
    curve = deletion_curve(KeywordModel("good"), ["good dog", *TEXTS], ks=(1, 5), draws=2)
    assert [(row["k"], row["texts"]) for row in curve["rows"]] == [(1, 4), (5, 2)]  # 6 words each: two texts
    with pytest.raises(PoolkitError, match="ks must be >= 1"):
        deletion_curve(KeywordModel("good"), TEXTS, ks=(0,))


def test_cli_explain_writes_one_html_file_and_pictures_and_refuses_to_overwrite(run_dir, tmp_path, capsys):
    data = tmp_path / "texts.csv"
    pd.DataFrame({"review": ["the good dog", "a bad cat sat"], "gold": ["pos", "neg"]}).to_csv(data, index=False)
    out, png = tmp_path / "report.html", tmp_path / "pictures"
    args = ["explain", "--model", run_dir, "--data", str(data), "--text-col", "review", "--target-col", "gold",
            "--out", str(out), "--png", str(png)]
    assert main(args) == 0
    page = out.read_text()
    assert page.count('id="explain-data"') == 1 and '"target": "neg"' in page and "://" not in page
    assert sorted(p.name for p in png.iterdir()) == [MANIFEST, "text_0001.png", "text_0002.png"]
    assert json.loads((png / MANIFEST).read_text())["outputs"] == ["text_0001.png", "text_0002.png"]
    assert main(args) == 2 and "already exists" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    assert main(["explain", "--model", run_dir, "--text", "a", "--out", str(tmp_path / "r.txt")]) == 2
    assert "must end in .html" in capsys.readouterr().err


@pytest.mark.slow
def test_the_packaged_minilm_gets_its_word_pieces_merged_back_into_the_texts_words():
    # a real WordPiece tokenizer: a word of several pieces gets their summed weight, words keep their original case
    from poolkit.models.encoders import load_tokenizer

    text = "The unbelievably tiny kittens purred."
    item = explain(None, [text], pooler="mean")[0]
    assert item.words == ["[CLS]", "The", "unbelievably", "tiny", "kittens", "purred", ".", "[SEP]"]
    pieces = [len(load_tokenizer(None).tokenize(word)) for word in item.words[1:-1]]
    assert max(pieces) > 1  # some word is split, or this test checks nothing
    total = sum(pieces) + 2
    np.testing.assert_allclose(item.weights[1:-1], np.array(pieces) / total, rtol=1e-5)


def test_a_picture_draws_dollar_signs_in_words_and_labels_as_written(tmp_path):
    # issue 32, item 15: a label like `$x^$` stopped `explain --png` with matplotlib's mathtext parse error
    from poolkit.explain.explainer import TextExplanation
    from poolkit.explain.pictures import text_figure

    item = TextExplanation("costs $x^$ now", ["costs", "$x^$", "now"], [None] * 3, np.array([0.2, 0.5, 0.3]),
                           prediction="$x^$", probability=0.9)
    figure = text_figure(item, "mean")
    figure.savefig(tmp_path / "p.png", format="png")  # rendering is where mathtext parses
    labels = [label.get_text() for label in figure.axes[0].get_yticklabels()]
    assert sorted(labels) == ["$x^$", "costs", "now"] and "prediction $x^$" in figure._suptitle.get_text()
