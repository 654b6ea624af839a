"""docs/composability/matrix.md, rendered whole from docs/composability/results.json (the outcomes of the transform
tests that ``scripts/composability_matrix.py`` ran): pooler x PyTorch transform, pass / fail."""

from __future__ import annotations

import re

from rendering import ROOT, Page, read_json, table

from poolkit import list_poolers

FOLDER = ROOT / "docs" / "composability"
#: test function -> column title, in the order of the table
COLUMNS = {
    "test_double_backward_matches_the_plain_path": "double backward",
    "test_batched_gradients_match_one_by_one": "batched gradients (is_grads_batched)",
    "test_gradgradcheck_in_double_precision": "gradgradcheck",
    "test_torch_func_grad_matches_autograd": "func.grad",
    "test_per_sample_gradients_with_vmap": "vmap(grad)",
    "test_jacrev_matches_autograd_jacobian": "jacrev",
    "test_forward_mode_ad_matches_func_jvp": "forward AD (dual numbers)",
    "test_compile_fullgraph_matches_eager": "compile fullgraph (aot_eager)",
    "test_inductor_compile_matches_eager": "compile (inductor)",
    "test_torch_export_answers_like_eager_on_other_inputs": "torch.export",
    "test_onnx_export_runs_in_onnxruntime": "ONNX + onnxruntime",
}


#: poolers holding an nn.LSTM / nn.GRU: compiled under torch._dynamo.config.allow_rnn (see the tests)
RNN_POOLERS = ("lstm_layers", "gru_layers")


def covered(tested: str | None) -> list[str]:
    """The poolers one test outcome speaks for: a pooler's own test, or a test of every token / layer pooler in one
    graph (``[token]``, ``[layer]``; an unparametrized test: the token poolers, as the ONNX export's)."""
    if tested is None:
        return list_poolers("token")
    return list_poolers(tested) if tested in ("token", "layer") else [tested]


def render() -> str:
    results = read_json(FOLDER / "results.json")
    cells: dict[str, dict[str, list[str]]] = {}
    for item in results["outcomes"]:
        match = re.fullmatch(r"(\w+?)(?:\[(?:(fast|plain)-)?(\w+)\])?", item["test"])
        if not match or match.group(1) not in COLUMNS:
            continue
        function, path, pooler = match.groups()
        mark = {"pass": "pass", "fail": "FAIL", "skip": "skipped"}[item["outcome"]]
        for one in covered(pooler):
            cells.setdefault(one, {}).setdefault(COLUMNS[function], []).append(
                f"{mark}" + (f" ({path})" if mark != "pass" and path else ""))
    columns = [c for c in COLUMNS.values() if any(c in row for row in cells.values())]
    rows = []
    order = {name: i for i, name in enumerate(list_poolers())}
    for pooler, row in sorted(cells.items(), key=lambda item: order.get(item[0], len(order))):
        shown = []
        for column in columns:
            marks = row.get(column)
            if not marks:
                shown.append("-")
            elif all(m == "pass" for m in marks):
                shown.append("pass" + (" (both paths)" if len(marks) == 2 else ""))
            else:
                shown.append(", ".join(m for m in marks if m != "pass"))
        if pooler in RNN_POOLERS:
            shown = [f"{cell} (allow_rnn)" if column.startswith("compile") and cell != "-" else cell
                     for column, cell in zip(columns, shown)]
        rows.append([f"`{pooler}`", *shown])
    passed = sum(o["outcome"] == "pass" for o in results["outcomes"])
    header = (f"Pooler x transform, from `docs/composability/results.json` (commit {results['commit']}, torch "
              f"{results['torch']}, {results['machine']}): {passed} of {len(results['outcomes'])} checks pass. "
              "'both paths': checked with poolkit's fast CPU forms and with the plain forms. '-': not checked "
              "(gradgradcheck and inductor: one pooler per family; ONNX: token poolers). 'allow_rnn': with "
              "PyTorch's `torch._dynamo.config.allow_rnn = True`, without which Dynamo refuses nn.LSTM / nn.GRU. "
              "Measured by `scripts/composability_matrix.py`, rendered by `scripts/docs.py --write composability`.\n\n")
    return header + table(["pooler", *columns], rows) + "\n"


PAGE = Page("docs/composability/matrix.md", render)
