"""Regenerate src/poolkit/data/embedded/ from Debian's wordnet-base: two stratified gzip CSVs and the WordNet license.

Deterministic: the same WordNet files give byte-identical outputs (fixed seed, gzip mtime 0).
Run: python scripts/build_embedded_data.py
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pandas as pd

from poolkit.data import load_builtin, stratified_sample
from poolkit.data.tables import TableData

OUT = Path(__file__).resolve().parents[1] / "src" / "poolkit" / "data" / "embedded"
COPYRIGHT = Path("/usr/share/doc/wordnet-base/copyright")
SEED = 0
NOTICE = """\
wordnet_supersense.csv.gz and wordnet_depth.csv.gz in this directory are derived from WordNet 3.0
(glosses, lexicographer file names and hypernym depths computed from the noun pointers), read from
the Debian package wordnet-base by scripts/build_embedded_data.py. WordNet's license follows.

"""


def write_csv_gz(frame: pd.DataFrame, name: str) -> None:
    """Write ``frame`` as a gzip CSV with a fixed header (no mtime, no file name), so rebuilds are byte-identical."""
    path = OUT / name
    path.write_bytes(gzip.compress(frame.to_csv(index=False).encode("utf-8"), compresslevel=9, mtime=0))
    print(f"{path}: {len(frame)} rows, {path.stat().st_size / 1024:.0f} KiB")


def license_text() -> str:
    """The 'License: WordNet3.0' paragraph of the Debian copyright file, unindented ('.' lines are blank lines)."""
    match = re.search(r"^License: WordNet3\.0\n((?: .*\n)+)", COPYRIGHT.read_text(encoding="utf-8"), re.MULTILINE)
    if match is None:
        raise SystemExit(f"no 'License: WordNet3.0' paragraph in {COPYRIGHT}")
    lines = [line[1:] for line in match.group(1).splitlines()]
    return "\n".join("" if line == "." else line for line in lines) + "\n"


def frame(data: TableData, column: str, values: list) -> pd.DataFrame:
    """text + one target column."""
    return pd.DataFrame({"text": data.texts, column: values})


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    supersense = stratified_sample(load_builtin("wordnet-supersense"), 3000, seed=SEED)
    labels = [supersense.label_names[i] for i in supersense.targets]
    write_csv_gz(frame(supersense, "label", labels), "wordnet_supersense.csv.gz")
    depth = stratified_sample(load_builtin("wordnet-depth"), 2000, seed=SEED)
    write_csv_gz(frame(depth, "depth", depth.targets[:, 0].astype(int).tolist()), "wordnet_depth.csv.gz")
    (OUT / "WORDNET_LICENSE.txt").write_text(NOTICE + license_text(), encoding="utf-8")


if __name__ == "__main__":
    main()
