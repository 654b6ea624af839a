"""Channel-spatial attention blocks: the contract over the whole registry (shape, dtype, gradients, compile, config
round trip), each family against its formula on hand-set weights, and the registry's errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import poolkit
from poolkit.blocks import FAMILIES, block_class, get_block, list_blocks
from poolkit.errors import PoolkitError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Small channel counts: reduction 4 keeps two hidden units in the MLPs.
C, OPTIONS = 8, {"reduction": 4}
TOPOLOGIES = [name for name in list_blocks() if block_class(name).family != "reference"]


def build(name: str, **options) -> torch.nn.Module:
    accepted = poolkit.blocks.block_options(name)
    return get_block(name, channels=C, **{k: v for k, v in {**OPTIONS, **options}.items() if k in accepted})


def ca_formula(x, mlp):
    """CA(x) = x * sigmoid(MLP(GAP x) + MLP(GMP x)), written out."""
    return x * torch.sigmoid(mlp(x.mean((2, 3))) + mlp(x.amax((2, 3))))[:, :, None, None]


def sa_formula(x, weight):
    """SA(x) = x * sigmoid(conv([mean_c x; max_c x])) with 'same' padding, written out."""
    pooled = torch.stack([x.mean(1), x.amax(1)], dim=1)
    return x * torch.sigmoid(F.conv2d(pooled, weight, padding=weight.shape[-1] // 2))


def set_gate(gate, bias):
    """A gate that ignores its input: its logits are ``bias`` for every image."""
    with torch.no_grad():
        gate.mlp[2].weight.zero_()
        gate.mlp[2].bias.copy_(torch.as_tensor(bias, dtype=torch.float32))


# -- the contract, every block --------------------------------------------------------------------------
def test_the_registry_has_the_studys_sixteen_topologies_and_the_two_references():
    # catches a family missing a topology of the issue or a block registered under the wrong family
    counts = {family: len(list_blocks(family)) for family in FAMILIES}
    assert counts == {"reference": 2, "sequential": 4, "parallel": 6, "residual": 3, "multiscale": 3}
    assert poolkit.list_blocks() == list_blocks() and len(TOPOLOGIES) == 16
    assert type(poolkit.get_block("cbam", channels=C)).__name__ == "ChannelThenSpatial"


@pytest.mark.parametrize("name", list_blocks())
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_block_keeps_shape_and_dtype_and_passes_gradients_to_every_parameter(name, dtype):
    # catches a block that changes the map's shape or dtype (a float32 constant upcasting bf16), and a parameter
    # left out of the forward (an unused gate or branch)
    block = build(name).to(dtype)
    x = torch.randn(3, C, 5, 6, dtype=dtype, requires_grad=True)
    out = block(x)
    assert out.shape == x.shape and out.dtype == dtype
    (out.float() * torch.randn(out.shape)).sum().backward()
    assert x.grad is not None
    dead = [key for key, p in block.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert not dead, f"{name}: no gradient reaches {dead}"


@pytest.mark.parametrize("name", ["ca", "sa_ca", "parallel_gated3", "residual_scaled", "ca_msa_gated"])
def test_a_block_of_each_family_compiles_to_the_same_values(name):
    # catches a forward that graph-breaks into something else or fails to trace (data-dependent Python control flow)
    block = build(name)
    x = torch.randn(2, C, 5, 5)
    compiled = torch.compile(block, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), block(x))


@pytest.mark.parametrize("name", list_blocks())
def test_config_round_trip_rebuilds_the_same_block(name):
    # catches get_config missing an option (the rebuilt block would differ in shape or values) or one that is not
    # plain JSON data
    block = build(name)
    with torch.no_grad():
        for p in block.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    config = json.loads(json.dumps(block.get_config()))
    rebuilt = get_block(**config)
    rebuilt.load_state_dict(block.state_dict())
    x = torch.randn(2, C, 4, 4)
    assert config["name"] == name and config["channels"] == C
    torch.testing.assert_close(rebuilt(x), block(x))
    assert rebuilt.get_config() == get_block(**block.get_config()).get_config()


# -- each family equals its formula -------------------------------------------------------------------
def test_channel_attention_uses_both_average_and_max_of_each_channel():
    # catches CA from GAP alone, a sigmoid per branch instead of one of the sum, and a gate applied across channels
    ca = get_block("ca", channels=2, reduction=2)
    with torch.no_grad():
        ca.mlp[0].weight.copy_(torch.tensor([[1.0, 0.0]]))
        ca.mlp[0].bias.zero_()
        ca.mlp[2].weight.copy_(torch.tensor([[1.0], [-1.0]]))
        ca.mlp[2].bias.zero_()
    x = torch.tensor([[[[0.0, 0.0], [1.0, 3.0]], [[5.0, 5.0], [5.0, 5.0]]]])  # channel 0: mean 1, max 3
    want = x * torch.tensor([1 / (1 + math.exp(-4.0)), 1 / (1 + math.exp(4.0))])[None, :, None, None]
    torch.testing.assert_close(ca(x), want)


def test_spatial_attention_convolves_the_channel_mean_then_the_channel_max():
    # catches the mean and max maps swapped, a sum instead of a mean over channels, and padding that shifts the map
    sa = get_block("sa", channels=3, kernel_size=3)
    weight = torch.zeros(1, 2, 3, 3)
    weight[0, 0, 1, 1], weight[0, 1, 1, 2] = 1.0, -0.5  # the mean at the pixel, the max one pixel to the right
    with torch.no_grad():
        sa.conv.weight.copy_(weight)
    x = torch.randn(2, 3, 4, 5)
    mean, top = x.mean(1, keepdim=True), x.amax(1, keepdim=True)
    right = F.pad(top[..., 1:], (0, 1))
    torch.testing.assert_close(sa(x), x * torch.sigmoid(mean - 0.5 * right))
    torch.testing.assert_close(sa(x), sa_formula(x, weight))


@pytest.mark.parametrize("name, order", [("ca_sa", "cs"), ("sa_ca", "sc"), ("ca_sa_ca", "csc"), ("sa_ca_sa", "scs")])
def test_sequential_blocks_compose_in_their_order(name, order):
    # catches CBAM applying SA first, and a three-step chain that reuses one step's weights for the other
    block = build(name)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p))
    x = torch.randn(2, C, 5, 5)
    want = x
    for step, module in zip(order, block.steps):
        want = ca_formula(want, module.mlp) if step == "c" else sa_formula(want, module.conv.weight)
    torch.testing.assert_close(block(x), want)
    if len(order) == 3:
        assert block.steps[0] is not block.steps[2]  # the repeated step has its own weights


def test_learnable_fusion_starts_as_the_plain_average_and_follows_its_scalar():
    # catches a fusion gate initialised away from 0, its sigmoid applied to the wrong branch, and an unhalved sum
    fused, plain = build("parallel_learnable"), build("parallel_avg")
    plain.load_state_dict({k: v for k, v in fused.state_dict().items() if k != "g"})
    x = torch.randn(2, C, 5, 5)
    ca, sa = ca_formula(x, fused.ca.mlp), sa_formula(x, fused.sa.conv.weight)
    torch.testing.assert_close(fused(x), plain(x))
    torch.testing.assert_close(plain(x), (ca + sa) / 2)
    with torch.no_grad():
        fused.g.fill_(2.0)
    share = 1 / (1 + math.exp(-2.0))
    torch.testing.assert_close(fused(x), share * ca + (1 - share) * sa)


def test_bidirectional_blocks_sum_both_orders_and_gate_against_the_input():
    # catches one order only, and a fusion gate that mixes the wrong way round (x where the attention should be)
    gated, plain = build("bidirectional_gated"), build("bidirectional")
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if not k.startswith("gate")})
    x = torch.randn(2, C, 5, 5)
    mlp, weight = gated.ca.mlp, gated.sa.conv.weight
    both = sa_formula(ca_formula(x, mlp), weight) + ca_formula(sa_formula(x, weight), mlp)
    torch.testing.assert_close(plain(x), both)
    set_gate(gated.gate, [math.log(3.0)] * C)  # sigmoid = 3/4 on the attention, 1/4 on x
    torch.testing.assert_close(gated(x), 0.75 * both + 0.25 * x)


def test_softmax_gates_weigh_each_branch_per_channel():
    # catches a softmax over channels instead of branches, and branches read in the wrong order
    two, three = build("parallel_gated"), build("parallel_gated3")
    x = torch.randn(2, C, 5, 5)
    set_gate(two.gate, [0.0] * C + [math.log(3.0)] * C)
    set_gate(three.gate, [0.0] * C + [math.log(2.0)] * C + [math.log(3.0)] * C)
    for block, weights in ((two, [0.25, 0.75]), (three, [1 / 6, 2 / 6, 3 / 6])):
        branches = [ca_formula(x, block.ca.mlp), sa_formula(x, block.sa.conv.weight)]
        if len(weights) == 3:
            branches.insert(0, x)
        torch.testing.assert_close(block(x), sum(w * b for w, b in zip(weights, branches)))


def test_residual_blocks_add_the_cbam_chain_to_the_input():
    # catches the identity path dropped, beta ignored or not learned, and a gate that scales x instead of the chain
    scaled = get_block("residual_scaled", channels=C, reduction=4, beta_init=0.0)
    x = torch.randn(2, C, 5, 5)
    torch.testing.assert_close(scaled(x), x)  # beta = 0: the identity
    chain = sa_formula(ca_formula(x, scaled.chain.steps[0].mlp), scaled.chain.steps[1].conv.weight)
    with torch.no_grad():
        scaled.beta.fill_(0.5)
    torch.testing.assert_close(scaled(x), x + 0.5 * chain)
    plain = build("residual")
    plain.load_state_dict(scaled.state_dict(), strict=False)
    torch.testing.assert_close(plain(x), x + chain)
    gated = build("residual_gated")
    gated.load_state_dict(scaled.state_dict(), strict=False)
    set_gate(gated.gate, [math.log(3.0)] * C)
    torch.testing.assert_close(gated(x), x + 0.75 * chain)
    assert build("residual_scaled").beta.item() == 1.0  # the documented default: the plain residual block


def test_multiscale_blocks_mix_kernels_and_reductions_as_documented():
    # catches one sigmoid per kernel instead of one over the sum, gate weights per kernel read in the wrong order,
    # and reductions whose channel weights are not averaged
    x = torch.randn(2, C, 5, 5)
    msa = get_block("ca_msa", channels=C, reduction=4, kernel_sizes=(1, 3))
    with torch.no_grad():
        for conv in msa.convs:
            conv.weight.copy_(torch.randn_like(conv.weight))
    y = ca_formula(x, msa.ca.mlp)
    pooled = torch.stack([y.mean(1), y.amax(1)], dim=1)
    logits = F.conv2d(pooled, msa.convs[0].weight) + F.conv2d(pooled, msa.convs[1].weight, padding=1)
    torch.testing.assert_close(msa(x), y * torch.sigmoid(logits))

    gated = get_block("ca_msa_gated", channels=C, reduction=4, kernel_sizes=(3, 5))
    set_gate(gated.gate, [0.0, math.log(3.0)])
    y = ca_formula(x, gated.ca.mlp)
    want = 0.25 * sa_formula(y, gated.sas[0].conv.weight) + 0.75 * sa_formula(y, gated.sas[1].conv.weight)
    torch.testing.assert_close(gated(x), want)

    mca = get_block("mca_sa", channels=C, reductions=(2, 4), kernel_size=3)
    weights = [torch.sigmoid(ca.mlp(x.mean((2, 3))) + ca.mlp(x.amax((2, 3)))) for ca in mca.cas]
    torch.testing.assert_close(mca(x), sa_formula(x * ((weights[0] + weights[1]) / 2)[:, :, None, None],
                                                  mca.sa.conv.weight))


# -- registry errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("call, match", [
    (lambda: get_block("cbma", channels=8), "unknown block 'cbma'. Did you mean 'cbam'"),
    (lambda: get_block("ca_sa", channels=8, reductio=4), "has no option 'reductio'. Did you mean 'reduction'.*"
                                                         "Its options: reduction, kernel_size"),
    (lambda: get_block("sa", channels=8, kernel_size=4), "kernel_size must be odd"),
    (lambda: get_block("ca", channels=8, reduction=0), "reduction must be a positive int"),
    (lambda: get_block("ca", channels=0), "channels must be a positive int"),
    (lambda: get_block("mca_sa", channels=8, reductions=(4, 4)), "reductions must be distinct"),
    (lambda: get_block("residual_scaled", channels=8, beta_init="1"), "beta_init must be a number"),
    (lambda: get_block("ca", channels=8)(torch.zeros(2, 4, 3, 3)), r"expects a map \(B, 8, H, W\), got \(2, 4, 3, 3\)"),
    (lambda: list_blocks("serial"), "family must be one of"),
])
def test_bad_names_options_and_inputs_fail_in_one_line(call, match):
    # catches an unknown option swallowed by **kwargs, an even kernel that silently changes the map size, and a
    # map of the wrong width reaching a Linear with a raw shape error
    with pytest.raises(PoolkitError, match=match) as err:
        call()
    assert "\n" not in str(err.value)
