"""Optional dependencies: the pooling core needs only torch and numpy; the rest comes with an extra."""

from __future__ import annotations

import importlib.util

from .errors import PoolkitError

#: What each extra brings: ``pip install 'poolkit[NAME]'``.
EXTRAS = {
    "hf": ("transformers", "safetensors", "accelerate", "tqdm"),
    "cli": ("pandas", "pyarrow", "rich", "tqdm", "matplotlib", "scipy", "sklearn", "filelock"),
    "st": ("sentence_transformers",),
    "onnx": ("onnx", "onnxscript", "onnxruntime"),
    "pyg": ("torch_geometric",),
    "kernels": ("numba",),
}


def _missing(module: str) -> bool:
    """True when ``module`` cannot be imported; a dotted name also when its package lacks it (too old a version)."""
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:  # a parent package of a dotted name is missing
        return True


def require(extra: str, *modules: str) -> None:
    """Raise a one-line PoolkitError naming the extra to install when one of ``modules`` (default: all of the
    extra's) cannot be imported."""
    missing = [m for m in modules or EXTRAS[extra] if _missing(m)]
    if missing:
        raise PoolkitError(f"this needs {', '.join(missing)}, which the [{extra}] extra installs: "
                           f"pip install 'poolkit[{extra}]'")
