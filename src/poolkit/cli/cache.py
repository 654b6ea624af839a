"""``poolkit cache list|clear``: the feature caches of ``poolkit compare`` (poolkit.training.features) and the ONNX
graphs exported for ``backend onnx`` (poolkit.models.onnx_graph)."""

from __future__ import annotations

import argparse

HELP = "list or clear compare's feature caches and the exported ONNX graphs"


def add_parser(sub) -> None:
    """The ``cache`` command and its actions, on the top-level subparsers ``sub``."""
    parser = sub.add_parser("cache", help=HELP, description=HELP)
    actions = parser.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    for name, func, text in (("list", run_list, "each cache: size, model, texts, layers"),
                             ("clear", run_clear, "remove every cache not being built (a running compare "
                                                 "reads one without a lock: clear between runs)")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--cache-dir", help="compare's --cache-dir (default: $POOLKIT_CACHE/features or "
                            "~/.cache/poolkit/features)")
        action.add_argument("--graph-dir", help="where the ONNX backend caches its graphs (default: "
                            "$POOLKIT_CACHE/onnx or ~/.cache/poolkit/onnx; with --cache-dir alone, graphs are left "
                            "out)")
        action.set_defaults(func=func)


def _root(args: argparse.Namespace):
    from pathlib import Path

    from ..training.features import default_cache_dir

    return Path(args.cache_dir) if args.cache_dir else default_cache_dir()


def run_list(args: argparse.Namespace) -> int:
    from ..training.features import list_caches

    root = _root(args)
    entries = list_caches(root)
    for entry in entries:
        meta = entry["meta"]
        about = (f"{meta.get('model', '?')}, {meta.get('texts', '?')} texts, {meta.get('layers', '?')} layers, "
                 f"max_length {meta.get('max_length', '?')}, {meta.get('bytes_per_text', '?')} bytes per text, "
                 f"format v{meta.get('version', '?')}"
                 if meta else "damaged (meta.json unreadable): rebuilt when next used")
        print(f"{entry['path'].name}  {entry['bytes'] / 2**20:8.1f} MiB  {about}")
    total = sum(entry["bytes"] for entry in entries)
    print(f"{len(entries)} cache(s), {total / 2**20:.1f} MiB in {root}")
    if not _with_graphs(args):
        return 0
    graphs, graph_root = _graphs(args)
    for entry in graphs:
        manifest = entry["manifest"]
        int8 = ", int8 copy" if "int8" in manifest else ""
        print(f"{entry['path'].name}  {entry['bytes'] / 2**20:8.1f} MiB  ONNX graph: {manifest.get('pooling', '?')} "
              f"pooling, {manifest.get('dim', '?')} dimensions, opset {manifest.get('opset', '?')}{int8}")
    print(f"{len(graphs)} ONNX graph(s), {sum(e['bytes'] for e in graphs) / 2**20:.1f} MiB in {graph_root}")
    return 0


def _with_graphs(args: argparse.Namespace) -> bool:
    """Whether the action covers the ONNX graphs too: not when a feature cache is named alone (--cache-dir)."""
    return not args.cache_dir or bool(args.graph_dir)


def _graphs(args: argparse.Namespace):
    from pathlib import Path

    from ..models.onnx_graph import default_graph_dir, list_graphs

    root = Path(args.graph_dir) if args.graph_dir else default_graph_dir()
    return list_graphs(root), root


def run_clear(args: argparse.Namespace) -> int:
    from ..training.features import clear_caches

    root = _root(args)
    removed, busy = clear_caches(root)
    kept = f"; {len(busy)} in use by a running compare, kept" if busy else ""
    print(f"removed {removed} cache(s) from {root}{kept}")
    if not _with_graphs(args):
        return 0
    from ..models.onnx_graph import clear_graphs

    _, graph_root = _graphs(args)
    removed, busy = clear_graphs(graph_root)
    kept = f"; {len(busy)} being exported, kept" if busy else ""
    print(f"removed {removed} ONNX graph(s) from {graph_root}{kept}")
    return 0
