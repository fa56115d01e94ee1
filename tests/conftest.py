"""Suite-wide guards."""
import os

import pytest


@pytest.fixture(autouse=True)
def _process_env_left_as_found():
    """A test that changes CUDA_VISIBLE_DEVICES in this process (place_device writes it) must restore it: a
    leaked value narrows every later test's GPUs (the runner then hands out one GPU and runs one experiment
    at a time). The test that leaks it fails here, not the unrelated tests after it."""
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    yield
    after = os.environ.get("CUDA_VISIBLE_DEVICES")
    if after != before:
        if before is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = before
        pytest.fail(f"the test left CUDA_VISIBLE_DEVICES={after!r} (it was {before!r}); restore it (monkeypatch)")


def pytest_collection_modifyitems(config, items):
    """An ``extended`` test is a slow one too: it never runs in the default suite (``-m "not slow"``)."""
    for item in items:
        if item.get_closest_marker("extended") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
