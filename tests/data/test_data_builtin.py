"""Built-in datasets: the embedded subsets ship in the package; WordNet and fortunes parse from Debian files."""

from __future__ import annotations

from importlib import resources

import numpy as np
import pytest

from poolkit.data import builtin, list_datasets, load_builtin, load_data
from poolkit.data.builtin import MIN_FORTUNES_PER_CATEGORY, hypernym_depths, read_wordnet
from poolkit.data.tables import fold_splits
from poolkit.errors import PoolkitError

HAS_WORDNET = (builtin.WORDNET_DIR / "data.noun").is_file()
HAS_FORTUNES = builtin.FORTUNES_DIR.is_dir()
needs_wordnet = pytest.mark.skipif(not HAS_WORDNET, reason="apt-get install wordnet-base")


def test_embedded_files_ship_with_the_package():
    folder = resources.files("poolkit.data").joinpath("embedded")
    names = {p.name for p in folder.iterdir()}
    assert {"wordnet_supersense.csv.gz", "wordnet_depth.csv.gz", "WORDNET_LICENSE.txt"} <= names
    assert "Princeton University" in folder.joinpath("WORDNET_LICENSE.txt").read_text(encoding="utf-8")
    for name in names:
        assert len(folder.joinpath(name).read_bytes()) < 300_000


def test_embedded_supersense():
    data = load_builtin("embedded")
    assert (len(data), data.task, data.targets.dtype) == (3000, "classification", np.int64)
    assert len(data.label_names) == 45 and "noun.animal" in data.label_names and "verb.motion" in data.label_names
    assert np.bincount(data.targets, minlength=45).min() >= 20  # stratified with a floor: every class is usable
    assert data.source.startswith("builtin:embedded")
    assert all(t.strip() for t in data.texts)


def test_embedded_depth():
    data = load_builtin("builtin:embedded-depth")
    assert (len(data), data.task, data.targets.shape) == (2000, "regression", (2000, 1))
    assert 2 <= data.targets.min() and data.targets.max() <= 19 and 6 <= data.targets.mean() <= 9


def test_limit_is_a_deterministic_stratified_subsample():
    small = load_builtin("embedded", limit=450, seed=3)
    assert len(small) == 450 and len(np.unique(small.targets)) == 45
    assert small.texts == load_builtin("embedded", limit=450, seed=3).texts
    assert small.texts != load_builtin("embedded", limit=450, seed=4).texts


def test_list_datasets_describes_every_name():
    infos = {info.name: info for info in list_datasets()}
    assert set(infos) == {"embedded", "embedded-depth", "wordnet-supersense", "wordnet-depth", "fortunes",
                          "wordnet-examples", "wordnet-similarity"}
    assert infos["wordnet-examples"].task == "retrieval" and infos["wordnet-similarity"].task == "similarity"
    assert infos["wordnet-depth"].task == "regression" and "wordnet-base" in infos["wordnet-depth"].needs
    assert all(info.description and info.source for info in infos.values())


def test_unknown_name_suggests_a_close_one():
    with pytest.raises(PoolkitError, match=r"unknown built-in dataset 'fortune'.*embedded, .*Did you mean 'fortunes'"):
        load_builtin("builtin:fortune")


def test_load_data_dispatches_on_the_prefix(tmp_path):
    assert load_data("builtin:embedded", limit=100).source.startswith("builtin:embedded")
    path = tmp_path / "t.csv"
    path.write_text("body,label\n" + "".join(f"text {i},{'ab'[i % 2]}\n" for i in range(10)), encoding="utf-8")
    data = load_data(str(path), limit=4, text_col="body")
    assert len(data) == 4 and data.texts[0].startswith("text")


@pytest.mark.parametrize("name,directory,package", [
    ("wordnet-supersense", "WORDNET_DIR", "wordnet-base"),
    ("wordnet-depth", "WORDNET_DIR", "wordnet-base"),
    ("fortunes", "FORTUNES_DIR", "fortunes"),
])
def test_missing_debian_package_is_one_line(monkeypatch, tmp_path, name, directory, package):
    monkeypatch.setattr(builtin, directory, tmp_path / "absent")
    with pytest.raises(PoolkitError) as info:
        load_builtin(name)
    message = str(info.value)
    assert "\n" not in message
    assert str(tmp_path / "absent") in message and f"apt-get install {package}" in message
    assert "builtin:embedded" in message


@pytest.mark.slow
@needs_wordnet
def test_wordnet_supersense_parses_all_synsets():
    data = load_builtin("wordnet-supersense")
    assert 117_000 <= len(data) <= 118_000 and len(data.label_names) == 45
    counts = dict(zip(data.label_names, np.bincount(data.targets)))
    assert counts["noun.artifact"] > 10_000 and counts["noun.motive"] > 20
    assert not any("|" in t[:3] or t != t.strip() for t in data.texts[:1000])


@pytest.mark.slow
@needs_wordnet
def test_wordnet_depth_of_known_synsets():
    nouns = read_wordnet("noun")
    depth = hypernym_depths(nouns)
    assert len(depth) == len(nouns) > 80_000  # every noun reaches a root
    assert depth["00001740"] == 0  # entity, the root
    dog = next(s for s in nouns if s.lemma == "dog" and "genus Canis" in s.gloss)
    # dog < domestic animal < animal < organism < living thing < whole < object < physical entity < entity
    assert depth[dog.offset] == 8
    data = load_builtin("wordnet-depth", limit=500)
    assert data.task == "regression" and len(data) == 500 and data.targets.max() <= 19


def test_a_gloss_splits_into_its_definition_and_examples():
    assert builtin.split_gloss('a domesticated carnivore; "the dog barked all night"; "a dog\'s life"') == (
        "a domesticated carnivore", ["the dog barked all night", "a dog's life"])
    assert builtin.split_gloss("a member of the genus Canis") == ("a member of the genus Canis", [])


def test_wu_palmer_is_nltks_over_the_deepest_shared_ancestor():
    # root r (1 node deep) -> a (2) -> b, c (3); b -> e (4); and a shortcut r -> e. lcs(e, c) = a (depth 2, deeper
    # than r): 2 * 2 / (2 + 1 + 2 * 2); catches a shallower subsumer chosen, or depths in place of edge counts
    up = {"a": {"a": 0, "r": 1}, "b": {"b": 0, "a": 1, "r": 2}, "c": {"c": 0, "a": 1, "r": 2},
          "e": {"e": 0, "b": 1, "a": 2, "r": 1}}
    depth = {"r": 1, "a": 2, "b": 3, "c": 3, "e": 2}.__getitem__
    assert builtin.wu_palmer("e", "c", up.__getitem__, depth) == pytest.approx(4 / 7)
    assert builtin.wu_palmer("b", "b", up.__getitem__, depth) == 1.0


def test_the_pair_sets_are_refused_where_a_labelled_table_is_needed():
    with pytest.raises(PoolkitError, match="builtin:wordnet-examples is a table of pairs for retrieval: score "
                                           "embeddings on it with `evaluate` or `compare` and `task` "
                                           "retrieval"):
        load_builtin("builtin:wordnet-examples")
    with pytest.raises(PoolkitError, match="builtin:embedded is a classification set, not pairs"):
        builtin.builtin_pairs("builtin:embedded")


@pytest.mark.slow
@needs_wordnet
def test_wordnet_pair_sets():
    # catches examples paired with another synset's definition, quotes left in a text, scores outside [0, 1], and
    # a similarity set without its spread (siblings high, random pairs low)
    from poolkit.data.pairs import load_pairs

    retrieval = load_pairs("builtin:wordnet-examples", "retrieval")
    assert len(retrieval.queries) > 2000 and 1990 <= len(retrieval.corpus) <= 2000
    assert not any('"' in t for t in retrieval.queries[:200] + retrieval.corpus[:200])
    glosses = {s.gloss for pos in ("noun", "verb", "adj", "adv") for s in read_wordnet(pos)}
    query, document = retrieval.queries[0], retrieval.corpus[next(iter(retrieval.relevant[0]))]
    assert any(g.startswith(document) and f'"{query}' in g for g in glosses)
    similarity = load_pairs("builtin:wordnet-similarity", "similarity")
    assert len(similarity.scores) == 2000 and 0 <= similarity.scores.min() and similarity.scores.max() <= 1
    assert (similarity.scores > 0.8).mean() > 0.3 and (similarity.scores < 0.4).mean() > 0.2
    with pytest.raises(PoolkitError, match="is a similarity set: pass `task` similarity"):
        load_pairs("builtin:wordnet-similarity", "retrieval")


@pytest.mark.slow
@pytest.mark.skipif(not HAS_FORTUNES, reason="apt-get install fortunes")
def test_fortunes_categories():
    data = load_builtin("fortunes")
    assert len(data.label_names) >= 30 and len(data) > 10_000
    assert "computers" in data.label_names and not any(n.endswith((".dat", ".u8")) for n in data.label_names)
    assert not any("\x08" in t or "\n%\n" in t or t == "%" for t in data.texts)
    assert "I have more humility in my little finger than you have in your whole BODY!" in " ".join(data.texts)
    # every category can be stratified over compare's folds, even in a --limit 4000 sample (the smallest kept
    # category then still has 3+ rows); 'pratchett' (2 entries) made every K >= 3 fail
    assert np.bincount(data.targets).min() >= MIN_FORTUNES_PER_CATEGORY and "pratchett" not in data.label_names
    assert len(fold_splits(load_builtin("fortunes", limit=4000), 5)) == 5
