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

settings.register_profile("poolkit", deadline=None, max_examples=12, derandomize=True,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile("poolkit")
