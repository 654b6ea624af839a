import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One torch thread per pytest-xdist worker (`make test` runs two on two cores): two workers of two OpenMP threads
# each oversubscribe the cores (OpenMP threads spinning while they wait for a core). The padding tests force one and
# two threads themselves (test_pooling_robustness.KERNELS).
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def one_torch_thread():
    """One torch thread, restored after: far faster than two spinning on a shared 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(params=["fast", "plain"])
def path(request):
    """Run a test once with poolkit's fast CPU forms allowed and once with the plain forms only (the ones that
    GPUs, torch.func, compile and export use)."""
    from poolkit.pooling import fast

    if request.param == "plain":
        with fast.disabled():
            yield request.param
    else:
        yield request.param


from hypothesis import HealthCheck, settings  # noqa: E402

# Property tests: "ci" (the default) draws the same examples on every run, so a red run is reproducible;
# POOLKIT_HYPOTHESIS=deep (``make test-deep``) draws fresh ones from the --hypothesis-seed it prints.
HYPOTHESIS_PROFILES = {"ci": {"max_examples": 30, "derandomize": True},
                       "deep": {"max_examples": 200, "derandomize": False}}
PROFILE = os.environ.get("POOLKIT_HYPOTHESIS", "ci")
if PROFILE not in HYPOTHESIS_PROFILES:
    raise pytest.UsageError(f"POOLKIT_HYPOTHESIS={PROFILE!r} is not a profile: use one of {', '.join(HYPOTHESIS_PROFILES)}")
for _name, _options in HYPOTHESIS_PROFILES.items():
    settings.register_profile(_name, deadline=None, print_blob=True, **_options,
                              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(PROFILE)


def pytest_report_header(config):
    return f"hypothesis profile {PROFILE}: {HYPOTHESIS_PROFILES[PROFILE]}"


@pytest.fixture(scope="module")
def accelerate_on_one_cpu_thread():
    """Run on the CPU (results must repeat bit for bit) in a fresh accelerate state, with one thread: the tiny
    model's ops are too small to share, and on a busy CPU two threads only wait for each other."""
    from accelerate.state import AcceleratorState

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    AcceleratorState._reset_state(reset_partial_state=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ACCELERATE_USE_CPU", "1")
        yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    """A tiny BERT saved once per test module (tests/dist_worker.py's toy model)."""
    from dist_worker import toy_model_dir

    return toy_model_dir(tmp_path_factory.mktemp("tiny_bert"))
