"""One pooler spec: get_config() is a plain dict that rebuilds the same pooler, options come from each
class's own constructor, every layer pooler is sized by num_layers."""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from helpers import ALL_POOLERS, HIDDEN, NUM_LAYERS, make_pooler, mask_from_lengths, random_layers, states_for
from poolkit import PoolkitError
from poolkit.pooling import build_pooler, describe_options, get_pooler, pooler_options, pooler_spec
from poolkit.pooling.registry import docs_of
from poolkit.pooling.spec import pooler_class


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_get_config_rebuilds_an_identical_pooler(name):
    pooler = make_pooler(name)
    config = pooler.get_config()
    assert json.loads(json.dumps(config)) == config  # plain JSON values only
    rebuilt = get_pooler(**config).eval()
    rebuilt.load_state_dict(pooler.state_dict())
    assert rebuilt.get_config() == config
    layers = random_layers(3, 5)
    mask = mask_from_lengths([5, 2, 0], 5)
    with torch.no_grad():
        assert torch.equal(rebuilt(states_for(rebuilt, layers), mask), pooler(states_for(pooler, layers), mask))


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_config_holds_every_option_and_repr_shows_it(name):
    pooler = make_pooler(name)
    config = pooler.get_config()
    assert set(config) == {"name", "hidden_size", *pooler_options(name)}
    text = repr(pooler)
    for key in ("hidden_size", *pooler_options(name)):
        assert f"{key}=" in text


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_listed_options_are_exactly_what_the_constructor_takes(name):
    """Every listed option, passed with its default (num_layers set), builds; nothing else is listed."""
    options = {k: v for k, v in pooler_options(name).items() if v is not inspect.Parameter.empty}
    if "num_layers" in options:
        options["num_layers"] = NUM_LAYERS
    assert get_pooler(name, HIDDEN, **options).get_config() == {"name": name, "hidden_size": HIDDEN, **options}
    accepted = set(inspect.signature(pooler_class(name).__init__).parameters) - {"self", "hidden_size"}
    assert set(pooler_options(name)) == accepted


@pytest.mark.parametrize("name", ALL_POOLERS)
def test_every_option_has_a_one_line_doc(name):
    for key, (_, doc) in describe_options(name).items():
        assert doc and "\n" not in doc, f"{name}: option {key!r} has no line in the option_docs of its classes"
    # no stale doc: every documented option is one that some pooler takes (a subclass may drop a base's option)
    assert set(docs_of(pooler_class(name))) <= {k for n in ALL_POOLERS for k in pooler_options(n)}


def test_options_changed_after_construction_do_not_leak_into_the_spec():
    spec = {"name": "concat", "poolers": ["mean", {"name": "attention", "attn_size": 8}]}
    pooler = build_pooler(spec, HIDDEN)
    spec["poolers"].append("max")
    pooler.get_config()["poolers"].append("min")
    assert pooler.get_config()["poolers"] == ["mean", {"name": "attention", "attn_size": 8}]


def test_build_pooler_fills_the_encoder_sizes_and_keeps_the_spec_values():
    assert build_pooler("weighted_layer", HIDDEN, num_layers=3).num_layers == 3
    assert build_pooler({"name": "weighted_layer", "num_layers": 2}, HIDDEN, num_layers=3).num_layers == 2
    assert build_pooler("mean", HIDDEN, num_layers=3).get_config() == {"name": "mean", "hidden_size": HIDDEN,
                                                                        "on_empty": "zeros"}
    with pytest.raises(PoolkitError, match="hidden_size is needed"):
        build_pooler("mean")


def test_pooler_spec_resolves_aliases_and_checks_options():
    assert pooler_spec("avg") == {"name": "mean"}
    assert pooler_spec("attention", attn_size=64) == {"name": "attention", "attn_size": 64}
    assert pooler_spec({"name": "learned_attention", "attn_size": 64}) == {"name": "attention", "attn_size": 64}
    with pytest.raises(PoolkitError, match="no option 'atn_size'"):
        pooler_spec("attention", atn_size=64)
    with pytest.raises(PoolkitError, match="a name or a dict with 'name'"):
        pooler_spec(["mean"])


def test_a_pooler_given_as_an_argument_is_recorded_as_its_spec():
    part = get_pooler("attention", HIDDEN, attn_size=8)
    pooler = get_pooler("concat", HIDDEN, poolers=[part, "mean"])
    layered = get_pooler("weighted_layer", HIDDEN, num_layers=NUM_LAYERS, token_pooler=part)
    assert pooler.get_config()["poolers"] == [part.get_config(), "mean"]
    assert layered.get_config()["token_pooler"] == part.get_config()
    json.dumps([pooler.get_config(), layered.get_config()])  # plain data, savable


def test_poolkit_pooling_exports_every_registered_pooler_class():
    # PyG-style: `from poolkit.pooling import AttentionPooler` builds what get_pooler("attention", ...) builds
    import poolkit.pooling

    for name in ALL_POOLERS:
        cls = pooler_class(name)
        assert getattr(poolkit.pooling, cls.__name__) is cls and cls.__name__ in poolkit.pooling.__all__, name
    pooler = poolkit.pooling.AttentionPooler(HIDDEN, attn_size=8)
    assert pooler.get_config() == get_pooler("attention", HIDDEN, attn_size=8).get_config()


def test_poolers_and_blocks_share_one_registry_and_one_config_mechanism():
    # catches a second registry or config path creeping back for blocks: both record their constructor arguments
    from poolkit.blocks import Block, get_block
    from poolkit.blocks.registry import BLOCKS
    from poolkit.pooling.registry import POOLERS, Configurable, Registry

    assert isinstance(POOLERS, Registry) and isinstance(BLOCKS, Registry)
    assert issubclass(Block, Configurable) and issubclass(pooler_class("mean"), Configurable)
    block = get_block("cbam", channels=16, reduction=4)
    # cbam is an alias of ca_sa: the config carries the canonical name
    assert block.get_config() == {"name": "ca_sa", "channels": 16, **{**BLOCKS.options("cbam"), "reduction": 4}}
    assert get_block(**block.get_config()).get_config() == block.get_config()
