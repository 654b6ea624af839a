"""docs/reliability.md's counts of the padding contract's edge cases, before and after, rendered from
docs/reliability/contract-55de4ff.json (measured by ``scripts/contract_before_after.py --against 55de4ff``), and the
peer suites' pass counts from docs/reliability/peers.json (``scripts/peer_suites.py``)."""

from __future__ import annotations

from rendering import ROOT, Page, made_at, read_json, table

RESULT = ROOT / "docs" / "reliability" / "contract-55de4ff.json"
PEERS = ROOT / "docs" / "reliability" / "peers.json"


def render() -> dict[str, str]:
    results = read_json(RESULT)
    before, after = results["before"], results["after"]
    lines = [f"Counted by `scripts/contract_before_after.py` at {results['against']} (before) and {results['commit']} "
             f"(after), from `{results['file']}`:", ""]
    cases = [("NaN padding reaches a real row", "real_row_nan"), ("an all-padding row gives NaN", "empty_row_nan"),
             ("B = 0 crashes", "batch_0_crash"), ("T = 0 crashes", "tokens_0_crash")]
    rows = [[text, f"{len(before[key])} of {before['poolers']} poolers", f"{len(after[key])} of {after['poolers']}"]
            for text, key in cases]
    rows.append(["gem with p = 50 finite", before["gem_p50_finite"], after["gem_p50_finite"]])
    return {"contract": "\n".join([*lines, table(["case", "before", "after"], rows)]), "peers": render_peers(read_json(PEERS))}


def render_peers(peers: dict) -> str:
    prov = peers["provenance"]
    rows = [[suite["peer"], suite["version"] or "not available", f"`{suite['file']}`", str(suite["passed"]),
             str(suite["failed"]), str(suite["xfailed"]), str(suite["skipped"])] for suite in peers["suites"]]
    total = sum(suite["passed"] + suite["failed"] + suite["xfailed"] + suite["skipped"] for suite in peers["suites"])
    return "\n".join([
        f"Run by `{peers['script']}` ({peers['seconds']:.0f} s; pytest exit code {peers['pytest_exit_code']}): commit "
        f"{made_at(prov)}; "
        f"{total:,} cases in all.", "",
        table(["peer", "version", "suite", "pass", "fail", "known difference (xfail)", "skipped"], rows,
              align="lllrrrr")])


PAGE = Page("docs/reliability.md", render)
