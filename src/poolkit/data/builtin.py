"""Built-in real datasets, addressed as ``builtin:NAME``: WordNet glosses, Debian fortunes, and small embedded subsets;
and tables of pairs for the embedding tasks (retrieval, similarity; read with :func:`builtin_pairs`).

Texts are WordNet glosses exactly as written (definition plus any quoted examples, no lemma prefix), so
the model must infer the supersense or depth from the definition alone.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from poolkit.data.tables import TableData, load_table, stratified_sample
from poolkit.errors import PoolkitError, suggest

WORDNET_DIR = Path("/usr/share/wordnet")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
PREFIX = "builtin:"

# WordNet 3.0 lexicographer files (lexnames): index = lex_filenum field of data.* lines.
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute noun.body "
    "noun.cognition noun.communication noun.event noun.feeling noun.food noun.group noun.location "
    "noun.motive noun.object noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time verb.body verb.change "
    "verb.cognition verb.communication verb.competition verb.consumption verb.contact verb.creation "
    "verb.emotion verb.motion verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
HYPERNYM_POINTERS = ("@", "@i")


@dataclass(frozen=True)
class DatasetInfo:
    """What ``builtin:NAME`` holds and what it needs on disk."""

    name: str
    task: str
    description: str
    source: str
    needs: str


@dataclass(frozen=True)
class Synset:
    """One line of a WordNet data file: offset, supersense, first lemma, gloss and hypernym offsets."""

    offset: str
    lexname: str
    lemma: str
    gloss: str
    hypernyms: tuple[str, ...]


def _not_installed(what: str, where: Path, package: str) -> PoolkitError:
    """The one-line error for a missing Debian data package."""
    return PoolkitError(
        f"{what} not found at {where}: install it with 'apt-get install {package}' "
        "(or use builtin:embedded, which ships with poolkit)"
    )


def read_wordnet(pos: str) -> list[Synset]:
    """Parse ``WORDNET_DIR/data.<pos>`` (noun, verb, adj, adv) of Debian's wordnet-base, skipping the license header."""
    path = WORDNET_DIR / f"data.{pos}"
    if not path.is_file():
        raise _not_installed("WordNet", WORDNET_DIR, "wordnet-base")
    synsets = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.startswith("  "):
                continue
            head, _, gloss = line.partition(" | ")
            fields = head.split()  # offset lex_filenum ss_type w_cnt (word lex_id)* p_cnt (symbol offset pos st)*
            p_at = 4 + 2 * int(fields[3], 16)
            pointers = fields[p_at + 1 : p_at + 1 + 4 * int(fields[p_at])]
            hypernyms = tuple(pointers[i + 1] for i in range(0, len(pointers), 4) if pointers[i] in HYPERNYM_POINTERS)
            lemma = fields[4].replace("_", " ")
            synsets.append(Synset(fields[0], LEXNAMES[int(fields[1])], lemma, gloss.strip(), hypernyms))
    return synsets


def hypernym_depths(synsets: list[Synset]) -> dict[str, int]:
    """Fewest hypernym / instance-hypernym edges from each synset up to a root (breadth-first down from the roots)."""
    children: dict[str, list[str]] = {s.offset: [] for s in synsets}
    for s in synsets:
        for parent in s.hypernyms:
            children[parent].append(s.offset)
    depth = {s.offset: 0 for s in synsets if not s.hypernyms}
    queue = deque(depth)
    while queue:
        node = queue.popleft()
        for child in children[node]:
            if child not in depth:
                depth[child] = depth[node] + 1
                queue.append(child)
    return depth


def read_fortunes() -> list[tuple[str, str]]:
    """(text, category) per entry in ``FORTUNES_DIR`` (Debian fortunes): '%' lines separate entries, file = category."""
    files = sorted(
        p for p in FORTUNES_DIR.glob("*") if p.is_file() and not p.is_symlink() and p.suffix not in (".dat", ".u8")
    )
    if not files:
        raise _not_installed("fortunes", FORTUNES_DIR, "fortunes")
    entries = []
    for path in files:
        text = re.sub("_+\x08+|.\x08", "", path.read_text(encoding="utf-8", errors="replace"))  # drop overstrikes
        entries += [(e.strip(), path.name) for e in re.split(r"(?m)^%\s*$", text) if e.strip()]
    return entries


def _classification(texts: list[str], labels: list[str], source: str) -> TableData:
    """TableData with class ids into the sorted distinct labels."""
    names = sorted(set(labels))
    index = {n: i for i, n in enumerate(names)}
    targets = np.array([index[lab] for lab in labels], dtype=np.int64)
    return TableData(texts, targets, "classification", names, ("label",), "text", source)


def _wordnet_supersense() -> TableData:
    """All 117k synsets: gloss -> one of 45 supersenses (lexicographer files)."""
    synsets = [s for pos in ("noun", "verb", "adj", "adv") for s in read_wordnet(pos)]
    return _classification([s.gloss for s in synsets], [s.lexname for s in synsets], f"{WORDNET_DIR}/data.*")


def _wordnet_depth() -> TableData:
    """The 82k noun synsets: gloss -> hypernym depth, float32 (N, 1)."""
    synsets = read_wordnet("noun")
    depth = hypernym_depths(synsets)
    targets = np.array([[depth[s.offset]] for s in synsets], dtype=np.float32)
    texts = [s.gloss for s in synsets]
    return TableData(texts, targets, "regression", None, ("depth",), "text", f"{WORDNET_DIR}/data.noun")


def split_gloss(gloss: str) -> tuple[str, list[str]]:
    """A WordNet gloss as its definition and its quoted example sentences: 'a dog; "the dog barked"' -> ('a dog',
    ['the dog barked'])."""
    examples = re.findall(r'"([^"]+)"', gloss)
    definition = gloss.split('"')[0].strip().rstrip(";:,").strip()  # examples follow '; "' (a few: ': "')
    return definition, [e.strip() for e in examples if e.strip()]


#: synsets sampled for the pair sets (seeded): enough queries to tell poolers apart, few enough to encode in minutes
PAIR_SYNSETS = 2000


def _wordnet_examples() -> pd.DataFrame:
    """Retrieval: each example sentence of 2,000 sampled WordNet synsets (all parts of speech) -> its synset's
    definition."""
    synsets = [s for pos in ("noun", "verb", "adj", "adv") for s in read_wordnet(pos)]
    with_examples = [(definition, examples) for definition, examples in map(split_gloss, (s.gloss for s in synsets))
                     if examples and definition]
    chosen = np.random.default_rng(0).choice(len(with_examples), PAIR_SYNSETS, replace=False)
    rows = [(example, with_examples[i][0]) for i in sorted(chosen) for example in with_examples[i][1]]
    return pd.DataFrame(rows, columns=["text", "pair"])


def wu_palmer(a: str, b: str, ancestors: Callable[[str], dict[str, int]], depth: Callable[[str], int]) -> float:
    """Wu & Palmer (1994) similarity of two synsets, as NLTK computes it: 2 D / (d_a + d_b + 2 D), with D the depth
    in nodes (a root: 1) of their least common subsumer -- the deepest shared ancestor -- and d_a, d_b the hypernym
    edges from each up to it; ``ancestors(x)``: {ancestor (x included): fewest edges up from x}."""
    up_a, up_b = ancestors(a), ancestors(b)
    shared = up_a.keys() & up_b.keys()
    if not shared:
        return 0.0
    lcs = max(shared, key=lambda x: (depth(x), -up_a[x] - up_b[x]))
    return 2 * depth(lcs) / (up_a[lcs] + up_b[lcs] + 2 * depth(lcs))


def _wordnet_similarity() -> pd.DataFrame:
    """Similarity: 2,000 pairs of WordNet noun definitions scored by the Wu-Palmer similarity of their synsets in the
    hypernym graph (0-1); a third of the pairs are siblings (a shared hypernym), a third share a grandparent, a third
    are random."""
    synsets = read_wordnet("noun")
    by_offset = {s.offset: s for s in synsets}
    depth = hypernym_depths(synsets)
    children: dict[str, list[str]] = {}
    for s in synsets:
        for parent in s.hypernyms:
            children.setdefault(parent, []).append(s.offset)

    @functools.lru_cache(maxsize=None)
    def ancestors(offset: str) -> dict[str, int]:
        found = {offset: 0}
        for parent in by_offset[offset].hypernyms:
            for node, edges in ancestors(parent).items():
                found[node] = min(found.get(node, edges + 1), edges + 1)
        return found

    rng = np.random.default_rng(0)
    pairs, seen = [], set()
    while len(pairs) < PAIR_SYNSETS:
        a = synsets[rng.integers(len(synsets))]
        kind = len(pairs) % 3
        if kind < 2 and a.hypernyms:
            parent = a.hypernyms[0]
            if kind == 1 and by_offset[parent].hypernyms:
                parent = by_offset[parent].hypernyms[0]  # a grandparent: its other descendants two levels down
                pool = [c for p in children.get(parent, []) for c in children.get(p, [])]
            else:
                pool = children.get(parent, [])
            pool = [c for c in pool if c != a.offset]
            if not pool:
                continue
            b = by_offset[pool[rng.integers(len(pool))]]
        else:
            b = synsets[rng.integers(len(synsets))]
        key = tuple(sorted((a.offset, b.offset)))
        if a.offset == b.offset or key in seen:
            continue
        seen.add(key)
        score = wu_palmer(a.offset, b.offset, ancestors, lambda x: depth[x] + 1)
        pairs.append((split_gloss(a.gloss)[0], split_gloss(b.gloss)[0], round(score, 4)))
    return pd.DataFrame(pairs, columns=["text", "pair", "score"])


#: fortune categories with fewer entries are left out of ``builtin:fortunes`` (Debian's 'pratchett' has 2,
#: 'ascii-art' 10, 'translate-me' 12): too few to stratify folds or to learn, and 'ascii-art' is not text
MIN_FORTUNES_PER_CATEGORY = 20


def _fortunes() -> TableData:
    """Fortune cookies -> their category file (~15k entries; categories with fewer than
    ``MIN_FORTUNES_PER_CATEGORY`` entries left out)."""
    entries = read_fortunes()
    counts = Counter(c for _, c in entries)
    kept = [(t, c) for t, c in entries if counts[c] >= MIN_FORTUNES_PER_CATEGORY]
    return _classification([t for t, _ in kept], [c for _, c in kept], str(FORTUNES_DIR))


def _embedded(filename: str, target: str, task: str) -> Callable[[], TableData]:
    """Loader of a gzip CSV (text + one target) shipped in ``poolkit/data/embedded`` (works from an installed wheel)."""

    def load() -> TableData:
        with resources.as_file(resources.files("poolkit.data").joinpath("embedded", filename)) as path:
            data = load_table(path, "text", (target,), task)
        data.source = f"poolkit/data/embedded/{filename}"
        return data

    return load


_WORDNET = "WordNet 3.0 (Princeton University), Debian package wordnet-base"
_SHIPPED = "nothing: ships with poolkit"
_DATASETS: dict[str, tuple[DatasetInfo, Callable[[], TableData]]] = {
    info.name: (info, loader)
    for info, loader in [
        (
            DatasetInfo(
                "embedded", "classification", "3,000 WordNet glosses -> supersense (45 classes)", _WORDNET, _SHIPPED
            ),
            _embedded("wordnet_supersense.csv.gz", "label", "classification"),
        ),
        (
            DatasetInfo(
                "embedded-depth", "regression", "2,000 WordNet noun glosses -> hypernym depth", _WORDNET, _SHIPPED
            ),
            _embedded("wordnet_depth.csv.gz", "depth", "regression"),
        ),
        (
            DatasetInfo(
                "wordnet-supersense", "classification", "117k WordNet glosses -> supersense (45 classes)",
                _WORDNET, "apt-get install wordnet-base",
            ),
            _wordnet_supersense,
        ),
        (
            DatasetInfo(
                "wordnet-depth", "regression", "82k WordNet noun glosses -> hypernym depth",
                _WORDNET, "apt-get install wordnet-base",
            ),
            _wordnet_depth,
        ),
        (
            DatasetInfo(
                "fortunes", "classification", "15k fortune cookies -> category file (those with >= 20 entries)",
                "Debian package fortunes", "apt-get install fortunes",
            ),
            _fortunes,
        ),
    ]
}


#: the tables of pairs (``poolkit evaluate``): name -> (info, loader of a DataFrame with text, pair[, score])
_PAIR_DATASETS: dict[str, tuple[DatasetInfo, Callable[[], pd.DataFrame]]] = {
    info.name: (info, loader)
    for info, loader in [
        (
            DatasetInfo(
                "wordnet-examples", "retrieval", "WordNet example sentences -> their synset's definition (2,000 "
                "synsets, all parts of speech)", _WORDNET, "apt-get install wordnet-base",
            ),
            _wordnet_examples,
        ),
        (
            DatasetInfo(
                "wordnet-similarity", "similarity", "2,000 pairs of WordNet noun definitions -> Wu-Palmer similarity "
                "of their synsets (0-1)", _WORDNET, "apt-get install wordnet-base",
            ),
            _wordnet_similarity,
        ),
    ]
}


def list_datasets() -> list[DatasetInfo]:
    """Every built-in dataset, the embedded ones first, the tables of pairs last."""
    return [info for info, _ in (*_DATASETS.values(), *_PAIR_DATASETS.values())]


def builtin_pairs(name: str) -> tuple[pd.DataFrame, DatasetInfo]:
    """The table of pairs ``builtin:NAME`` (columns text, pair and, for similarity, score) and what it is."""
    name = name.removeprefix(PREFIX)
    if name not in _PAIR_DATASETS:
        kind = f"a {_DATASETS[name][0].task} set, not pairs" if name in _DATASETS else "not a built-in dataset"
        raise PoolkitError(f"builtin:{name} is {kind}: the tables of pairs are "
                           f"{', '.join(PREFIX + n for n in _PAIR_DATASETS)}.{suggest(name, _PAIR_DATASETS)}")
    info, loader = _PAIR_DATASETS[name]
    return loader(), info


def load_builtin(name: str, limit: int | None = None, seed: int = 0) -> TableData:
    """Load ``builtin:NAME`` (prefix optional); ``limit`` keeps a deterministic stratified subsample of that size."""
    name = name.removeprefix(PREFIX)
    if name in _PAIR_DATASETS:
        raise PoolkitError(f"builtin:{name} is a table of pairs for {_PAIR_DATASETS[name][0].task}: score embeddings "
                           f"on it with `evaluate` or `compare` and `task` {_PAIR_DATASETS[name][0].task}")
    if name not in _DATASETS:
        raise PoolkitError(
            f"unknown built-in dataset {name!r}: choose one of {', '.join(_DATASETS)}.{suggest(name, _DATASETS)}"
        )
    data = _DATASETS[name][1]()
    data.source = f"{PREFIX}{name} ({data.source})"
    return data if limit is None else stratified_sample(data, limit, seed)


def load_data(spec: str, limit: int | None = None, seed: int = 0, **table_args) -> TableData:
    """``builtin:NAME`` -> :func:`load_builtin`; anything else is a path for :func:`load_table` (``table_args``)."""
    if spec.startswith(PREFIX):
        return load_builtin(spec, limit, seed)
    data = load_table(spec, **table_args)
    return data if limit is None else stratified_sample(data, limit, seed)
