import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


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
