"""Every research page (a ``Page`` with ``readings``): as committed it matches its result files; a claim typed by
hand outside the rendered blocks is refused; a verdict edited inside its verdicts block is reported stale, and only
that block. The one check every page's reading tests share; the per-page files test how each page reads its runs."""

from __future__ import annotations

import docs
import pytest
from reading_checks import first_verdict, with_first_verdict_flipped

from poolkit.errors import PoolkitError

RESEARCH = [name for name in docs.registered() if docs.load(name).readings]


def test_the_research_pages_are_the_ones_with_readings():
    # catches a research page whose readings flag was dropped (its prose could then claim anything)
    assert {"channel-spatial", "gated-mlp", "mil", "operator", "sets", "snr", "spurious", "task-arithmetic",
            "vision"} <= set(RESEARCH)


@pytest.mark.parametrize("name", RESEARCH)
def test_a_research_page_refuses_a_typed_claim_and_reports_a_flipped_verdict(name):
    # catches a page whose prose may carry a reading of its own, and a verdicts block not rendered from its tests
    page = docs.load(name)
    text = page.file().read_text()
    assert page.update(text)[1] == []
    row = first_verdict(text)
    with pytest.raises(PoolkitError, match="hand-written readings"):
        page.update(text + f"\nHere {row['a']} beats {row['b']}.\n")
    flipped = with_first_verdict_flipped(text)
    assert flipped != text
    assert page.update(flipped)[1] == ["verdicts"]
