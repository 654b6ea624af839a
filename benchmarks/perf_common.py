"""Shared helpers of the performance suite: devices, interleaved timing, ratio tables, JSON results.

Every figure the suite reports is a *ratio* of variants measured side by side in one run: each repeat
times every variant once, in alternating order (A B C ..., then ... C B A), and a ratio is the median
over repeats of the per-repeat ratio. Load from other processes on a shared machine then hits the
variants alike; absolute milliseconds are printed for orientation only.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import platform
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from poolkit.provenance import cpu_capability, cpu_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import rendering  # noqa: E402  (the docs tool's shared Markdown)

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cpu or cuda (default: cuda when available)")
    parser.add_argument("--full", action="store_true", help="the whole grid / more repeats (default: --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats (median reported)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default 1: on a machine whose cores other jobs share, a second "
                             "thread mostly waits for its core at every parallel op; 0 = torch's default)")
    parser.add_argument("--background", type=int, default=0, metavar="N",
                        help="N busy processes (a Python spin loop each) beside the timing, from before the first "
                             "repeat to the end of the run: a controlled load, like other work sharing the cores "
                             "(default 0: none)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")


def comma_choices(choices: Sequence[str], what: str) -> Callable[[str], list[str]]:
    """An argparse ``type`` for a comma-separated list of ``choices`` (``what`` names them in the error): anything else,
    or nothing, is a usage error (exit 2) before any work."""
    def parse(text: str) -> list[str]:
        names = [name.strip() for name in text.split(",") if name.strip()]
        unknown = [name for name in names if name not in choices]
        if not names or unknown:
            raise argparse.ArgumentTypeError(f"{', '.join(unknown) or repr(text)}: not {what} here; choose from "
                                             f"{', '.join(choices)}")
        return names
    return parse


def parse_and_setup(doc: str, argv: list[str] | None,
                    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None):
    """A script's command line (the common options plus its own) parsed, threads and seed set: -> (args, device)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser)
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    return args, setup(args)


def setup(args: argparse.Namespace) -> torch.device:
    if args.threads and args.device == "cpu":
        torch.set_num_threads(args.threads)
    start_background(args.background)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda asked for but torch.cuda.is_available() is False")
    return device


def start_background(count: int) -> list[subprocess.Popen]:
    """``count`` busy processes, a Python spin loop each, for the rest of this run: the controlled background load
    of ``--background``. Each takes a core when it can, as another job would; each is killed at this run's exit,
    and stops by itself once this process is gone (killed by a signal, it runs no exit handler)."""
    if count < 0:
        raise SystemExit(f"--background must be 0 or more, got {count}")
    spin = f"import os\nwhile os.getppid() == {os.getpid()}:\n    pass"  # this pid: a spinner started late still stops
    busy = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]
    atexit.register(lambda: [process.kill() for process in busy])
    return busy


class Worker:
    """A process run as ``command`` (with ``env``, default this one's) that answers over stdin / stdout: first a JSON
    ready line, then ``done`` after each command (``pass``: its work once; ``vectors PATH``: its vectors saved there).
    A call runs one pass and returns when it is done, so the interleaved repeats time it beside the variants here. A
    worker that fails, or gives no reply within ``timeout`` seconds, is killed and raises RuntimeError with its last
    line on stderr; a call (a timed pass) keeps that error in ``failure`` instead, and later calls return at once, so
    that the run goes on without it. ``ready``: its ready line."""

    def __init__(self, command: list[str], timeout: float = 900.0, env: dict[str, str] | None = None) -> None:
        self.timeout, self.log = timeout, tempfile.TemporaryFile("w+")
        self.failure: str | None = None
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        text=True, env=env)
        try:
            self.ready = json.loads(self.reply())
        except Exception:
            self.close()
            raise

    def reply(self) -> str:
        """The worker's next line on stdout, or RuntimeError (the worker killed) when none comes in time."""
        with selectors.DefaultSelector() as selector:
            selector.register(self.process.stdout, selectors.EVENT_READ)
            line = self.process.stdout.readline() if selector.select(self.timeout) else ""
        if not line:
            raise RuntimeError(self.last_error())
        return line

    def ask(self, command: str) -> None:
        try:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(self.last_error()) from None
        if self.reply().strip() != "done":
            raise RuntimeError(self.last_error())

    def __call__(self) -> None:
        if self.failure is None:
            try:
                self.ask("pass")
            except RuntimeError as err:
                self.failure = f"failed during its passes: {err}"

    def vectors(self, path: Path):
        """Its vectors, saved by the worker at ``path`` (``.npy``), as a numpy array."""
        import numpy as np

        self.ask(f"vectors {path}")
        return np.load(path)

    def last_error(self) -> str:
        """The worker's last line on stderr (its error), or how it ended; the worker is stopped first."""
        self.stop()
        self.log.seek(0)
        lines = [line.strip() for line in self.log.read().splitlines() if line.strip()]
        return lines[-1][:200] if lines else f"the worker ended with code {self.process.returncode}"

    def stop(self) -> None:
        """Ends the worker: the end of its stdin, then a kill if it has not ended within a minute."""
        if self.process.poll() is None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def close(self) -> None:
        self.stop()
        self.log.close()


def describe(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"CPU, {torch.get_num_threads()} torch threads, {os.cpu_count()} cores visible (torch {torch.__version__})"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_calls(fn: Callable[[], Any], calls: int, device: torch.device) -> float:
    """Seconds per call of ``fn`` over ``calls`` back-to-back calls (device synchronised at both ends)."""
    sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - start) / calls


def interleaved(variants: dict[str, Callable[[], Any]], device: torch.device, repeats: int = 5,
                min_sample_s: float = 0.02, warmup: int = 1) -> dict[str, list[float]]:
    """Per-repeat seconds per call of every variant, the variants interleaved in alternating order.

    Each variant is warmed up, then timed once more to give it its own number of calls per sample
    (enough to last about ``min_sample_s``) so that fast variants are not timed at the clock's resolution.
    """
    calls = {}
    for name, fn in variants.items():
        for _ in range(warmup):
            fn()
        once = time_calls(fn, 1, device) if min_sample_s > 0 else 1.0
        calls[name] = max(1, min(50, int(min_sample_s / max(once, 1e-6))))
    times: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(time_calls(variants[name], calls[name], device))
    return times


def timed_call(fn: Callable[[], torch.Tensor], train: bool, leaves: Sequence[torch.Tensor] = ()) -> Callable[[], None]:
    """What is timed: ``fn()`` under ``torch.inference_mode`` (``train`` False), or ``fn().backward(g)`` with
    a fixed dense random g, then the leaves' gradients dropped. (A head sends a dense gradient;
    ``.sum().backward()`` would send an expanded stride-0 view, which some kernels take a slow path for.)"""
    if not train:
        def forward():
            with torch.inference_mode():
                fn()
        return forward
    grads: dict[tuple[torch.Size, torch.dtype], torch.Tensor] = {}

    def forward_backward():
        out = fn()
        key = (out.shape, out.dtype)
        if key not in grads:
            grads[key] = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out)
        out.backward(grads[key])
        for leaf in leaves:
            leaf.grad = None
    return forward_backward


def ratio(times: dict[str, list[float]], num: str, den: str) -> float:
    """Median over repeats of time[num] / time[den] measured in the same repeat."""
    return statistics.median(a / b for a, b in zip(times[num], times[den]))


def per_repeat(times: dict[str, list[float]], num: str, den: str) -> list[float]:
    """Every repeat's ratio time[num] / time[den], in the order measured (what ``ratio`` takes the median of)."""
    return [a / b for a, b in zip(times[num], times[den])]


def every_repeat(rows: list[dict]) -> tuple[int, int]:
    """(how many rows' ``per_repeat`` ratios are all over 1, how many all under 1): the cells whose second side was
    faster, or slower, in every repeat."""
    return (sum(all(v > 1 for v in r["per_repeat"]) for r in rows),
            sum(all(v < 1 for v in r["per_repeat"]) for r in rows))


def spread(times: dict[str, list[float]], num: str, den: str) -> tuple[float, float]:
    """Lowest and highest per-repeat ratio time[num] / time[den]."""
    ratios = per_repeat(times, num, den)
    return min(ratios), max(ratios)


def median_ms(times: dict[str, list[float]], name: str) -> float:
    return statistics.median(times[name]) * 1e3


#: The suite's Markdown tables: padded, since they are read in a terminal as well as in docs/performance.md.
table = partial(rendering.table, padded=True)


def verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=Path(__file__).resolve().parent, capture_output=True, text=True,
                              check=True).stdout.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return ""


def run_info(device: torch.device, args: argparse.Namespace | None = None) -> dict[str, Any]:
    """Where and on what a result was measured, for its JSON: the commit (and the working tree's uncommitted
    paths, since the suite times the tree as it is), machine, torch / Python versions, the script's parsed
    options and the load average when it started (other processes' load is the main source of noise)."""
    return {"commit": _git("rev-parse", "HEAD").strip(),
            "uncommitted": [line[3:] for line in _git("status", "--porcelain", "--untracked-files=no").splitlines()],
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": describe(device),
            "machine": {"cpu": cpu_model(), "cpu_capability": cpu_capability(), "cores": os.cpu_count(),
                        "platform": platform.platform(),
                        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None},
            "torch": torch.__version__, "python": platform.python_version(),
            "options": {} if args is None else {k: v if isinstance(v, (int, float, bool, type(None))) else str(v)
                                                for k, v in vars(args).items()}}


def save_json(path: Path | None, payload: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str))


def load_label(result: dict) -> str:
    """A sweep's load in words: quiet, or beside its ``--background`` busy processes."""
    busy = result["settings"].get("background")
    return f"beside {busy} busy processes" if busy else "quiet"


def run_sweep(doc: str, argv: list[str] | None, kind: str | Callable[..., str], title: str | Callable[..., str],
              settings: Callable[..., dict[str, Any]],
              sweep: Callable[..., list[dict]], render: Callable[[dict], str],
              render_rule: Callable[[list[dict]], str],
              add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
              chosen: Callable[[argparse.Namespace], dict[str, Any]] = lambda args: {}) -> dict:
    """The main of a sweep behind a rule (``perf_row_slices``, ``perf_blocks``): the common arguments and the script's
    own (``add_arguments``), ``settings(**chosen(args))`` read once the thread count is set, ``sweep(device, repeats,
    **chosen(args))`` timed, its table and rule checks printed, the JSON saved. ``kind`` and ``title`` may be
    functions of ``**chosen(args)`` too."""
    args, device = parse_and_setup(doc, argv, add_arguments)
    extra = chosen(args)
    kind, title = (text(**extra) if callable(text) else text for text in (kind, title))
    repeats = args.repeats or 5
    info = run_info(device, args)
    print(f"# {title}, {torch.get_num_threads()} torch threads, {repeats} repeats")
    result = {"kind": kind, **info,
              "settings": {**settings(**extra), "repeats": repeats, "threads": torch.get_num_threads(),
                           "background": args.background},
              "rows": sweep(device, repeats, **extra)}
    print(render(result))
    print(render_rule([result]))
    save_json(args.json, result)
    return result
