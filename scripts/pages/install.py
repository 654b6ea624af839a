"""docs/install/footprint.md, rendered whole from docs/install/footprint.json (measured by
``scripts/install_footprint.py``): what ``pip install poolkit`` and ``pip install 'poolkit[all]'`` install."""

from __future__ import annotations

from rendering import ROOT, Page, read_json, table

FOLDER = ROOT / "docs" / "install"


def render() -> str:
    """The page: a table of footprint.json's numbers."""
    data = read_json(FOLDER / "footprint.json")
    core, full = data["installs"]["core"], data["installs"]["all"]
    base = core["torch_pin_alone"]
    torch = next(name for name in core["installed"] if name.startswith("torch=="))
    rows = [("the torch pin alone", base["distributions"], base["site_packages_mb"],
             round(base["site_packages_mb"] - core["torch_mb"], 1), ""),
            *[(label, d["distributions"], d["site_packages_mb"], d["without_torch_mb"],
               round(d["site_packages_mb"] - d["torch_pin_alone"]["site_packages_mb"], 1))
              for label, d in (("`pip install poolkit`", core), ("`pip install 'poolkit[all]'`", full))]]
    lines = [
        "# Install footprint",
        "",
        f"Fresh venvs, `{data['torch_pin']}` installed first (`{torch}`), then poolkit at commit",
        f"`{data['commit'][:12]}`; Python {data['python']}, {data['machine']}, {data['date']}. Measured by",
        "`scripts/install_footprint.py`, rendered from `footprint.json` by `scripts/docs.py --write install`.",
        "",
        table(["install", "distributions", "site-packages MB", "without torch MB", "added over the torch pin MB"], rows,
              align="lrrrr"),
        "",
        f"torch's own files: {core['torch_mb']} MB; \"without torch\" keeps its dependencies (sympy, networkx, ...).",
        f"{data['units']}.",
        "",
        f"The core adds: {', '.join(core['added'])}.",
        "",
        f"`[all]` adds: {', '.join(full['added'])}.",
        "",
    ]
    return "\n".join(lines)


PAGE = Page("docs/install/footprint.md", render)
