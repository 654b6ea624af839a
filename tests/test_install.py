"""A torch-only core: ``import poolkit`` and every pooler work with no extra installed, and each part that needs
an extra says which one in a single line. Optional packages are hidden from a fresh interpreter's path finder,
as if they were not installed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest

import poolkit
from poolkit.extras import EXTRAS

HF = ["transformers", "safetensors", "accelerate", "huggingface_hub", "tokenizers"]
CLI = ["pandas", "pyarrow", "rich", "matplotlib", "scipy", "sklearn"]
ST = ["sentence_transformers"]
OPTIONAL = [*HF, *CLI, *ST, "tqdm"]  # tqdm: in [hf] (TextEncoder's bars, a transformers dependency) and [cli]

PRELUDE = """
import importlib.machinery, json, sys
BLOCKED, OPTIONAL = set(json.loads(sys.argv[1])), set(json.loads(sys.argv[2]))

class HidingFinder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        return None if name.partition(".")[0] in BLOCKED else super().find_spec(name, path, target)

assert importlib.machinery.PathFinder in sys.meta_path and not BLOCKED & set(sys.modules)
sys.meta_path[:] = [HidingFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]

def loaded():
    return {name.partition(".")[0] for name in sys.modules}
"""


def run_python(body: str, blocked: list[str] = ()) -> dict:
    """Run ``body`` in a fresh interpreter where the ``blocked`` packages cannot be found; returns the JSON
    object it prints last."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body), json.dumps(list(blocked)),
                           json.dumps(OPTIONAL)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("blocked", [OPTIONAL, []], ids=["extras-missing", "extras-installed"])
def test_every_pooler_works_on_the_core_alone(blocked):
    result = run_python("""
        import numpy, torch
        before = loaded()
        import poolkit
        shapes = {}
        for name in poolkit.list_poolers():
            options = {"num_layers": 4} if "num_layers" in poolkit.pooler_options(name) else {}
            pooler = poolkit.get_pooler(name, hidden_size=8, **options)
            states = [torch.randn(2, 3, 8) for _ in range(5)] if pooler.kind == "layer" else torch.randn(2, 3, 8)
            shapes[name] = [list(pooler(states, torch.tensor([[1, 1, 0], [1, 1, 1]])).shape), pooler.output_dim]
        print(json.dumps({"shapes": shapes, "optional_loaded": sorted(OPTIONAL & (loaded() - before)),
                          "numba": "numba" in sys.modules}))
    """, blocked)
    assert sorted(result["shapes"]) == sorted(poolkit.list_poolers())
    assert {name: shape for name, (shape, dim) in result["shapes"].items() if shape != [2, dim]} == {}
    # with them installed too: none imported, even inside a try; but numba (the [kernels] extra, whose loops the
    # statistics run) imports scipy where it is installed
    assert result["optional_loaded"] == (["scipy"] if result["numba"] and "scipy" not in blocked else [])


@pytest.mark.parametrize(("blocked", "cases"), [
    (OPTIONAL, [("import poolkit.models", "hf"), ("poolkit.TextEncoder", "hf"), ("poolkit.train", "hf")]),
    (CLI, [("import poolkit.training", "cli"), ("poolkit.compare", "cli"), ("from poolkit.data import load_table", "cli"),
           ("import poolkit_bench", "cli")]),
    (ST, [("import poolkit.models.st_pooling", "st")]),
], ids=["hf-missing", "cli-missing", "st-missing"])
def test_a_missing_extra_is_named_in_one_line(blocked, cases):
    """Each statement in a child forked from one interpreter that has imported poolkit with the extra hidden: every
    statement starts from the same state (a fresh interpreter each would cost seconds apiece)."""
    result = run_python(f"""
        import os
        import poolkit
        found = []
        for statement in {[statement for statement, _ in cases]!r}:
            read, write = os.pipe()
            if os.fork() == 0:  # the child: the statement, its outcome through the pipe, then gone
                try:
                    exec(statement)
                    outcome = {{"type": None}}
                except Exception as err:
                    outcome = {{"type": type(err).__name__, "message": str(err)}}
                os.write(write, json.dumps(outcome).encode())
                os._exit(0)
            os.close(write)
            with os.fdopen(read) as pipe:
                found.append(json.loads(pipe.read()))
            os.wait()
        print(json.dumps({{"found": found}}))
    """, blocked)
    for (statement, extra), outcome in zip(cases, result["found"], strict=True):
        assert outcome["type"] == "PoolkitError", (statement, outcome)
        assert "\n" not in outcome["message"] and f"pip install 'poolkit[{extra}]'" in outcome["message"], statement


def test_the_hf_extra_alone_encodes_texts(tmp_path):
    from tiny_models import tiny_bert_dir

    path = tiny_bert_dir(tmp_path / "bert")
    result = run_python(f"""
        import poolkit
        vectors = poolkit.encode(["the cat sat", "a dog ran fast"], model={path!r}, pooler="mean")
        print(json.dumps({{"shape": list(vectors.shape), "model": poolkit.PooledModel.__name__}}))
    """, CLI + ST)
    assert result == {"shape": [2, 32], "model": "PooledModel"}


@pytest.mark.parametrize(("name", "module"), [
    ("TextEncoder", "poolkit.models.text_encoder"),
    ("encode", "poolkit.models.text_encoder"),
    ("PooledModel", "poolkit.models.pooled_model"),
    ("PooledConfig", "poolkit.models.pooled_model"),
    ("compare", "poolkit.training.api"),
    ("train", "poolkit.training.api"),
    ("predict", "poolkit.training.api"),
    ("merge", "poolkit.training.merging"),
])
def test_lazy_names_are_listed_and_resolve(name, module):
    assert name in poolkit.__all__
    assert getattr(poolkit, name) is getattr(sys.modules[module], name)
    with pytest.raises(AttributeError, match="no_such_name"):
        poolkit.no_such_name  # noqa: B018


def test_pyproject_core_is_torch_and_numpy_and_extras_hold_what_require_checks():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {re.match(r"[A-Za-z0-9_.-]+", r).group().lower().replace("_", "-") for r in requirements}

    extras = project["optional-dependencies"]
    assert names(project["dependencies"]) == {"torch", "numpy"}
    assert extras["all"] == ["poolkit[hf,cli,st]"]
    assert {"all", "model"} <= {e for r in extras["dev"] if r.startswith("poolkit[") for e in r[8:-1].split(",")}
    distributions = metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        for module in modules:
            assert {d.lower() for d in distributions[module]} & names(extras[extra]), (extra, module)


def test_the_paper_benchmarks_are_their_own_distribution(tmp_path):
    """poolkit's wheel holds no paper-benchmark module; poolkit-bench (benchmarks/papers) adds the eight
    `poolkit bench` commands through its entry point. Catches the benchmarks packaged back into the library, or an
    entry point that lists fewer commands than the distribution has."""
    from poolkit.cli import BENCHMARK_GROUP, bench_commands

    root = Path(__file__).parents[1]
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                            "--wheel-dir", str(tmp_path), str(root)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    import zipfile

    [wheel] = tmp_path.glob("poolkit-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(name.startswith("poolkit/pooling/") for name in names)
    assert not [name for name in names if name.startswith(("poolkit/bench", "poolkit_bench"))]
    [point] = metadata.entry_points(group=BENCHMARK_GROUP)
    assert point.dist.name == "poolkit-bench"
    assert [command.name for command in bench_commands()] == [
        "snr", "snr-sweep", "vision", "channel-spatial", "spurious", "mil", "sets", "operator", "gated-mlp",
        "task-arithmetic"]


def test_bench_without_the_benchmarks_says_what_to_install(monkeypatch, capsys):
    import poolkit.cli as cli

    monkeypatch.setattr(cli, "bench_commands", lambda: [])
    assert cli.main(["bench", "snr", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install -e benchmarks/papers" in err
