import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _polytc_cache_dir(tmp_path_factory):
    """Keep compiled kernels out of the user's cache: one temporary cache per session."""
    old = os.environ.get("POLYTC_CACHE_DIR")
    os.environ["POLYTC_CACHE_DIR"] = str(tmp_path_factory.mktemp("polytc-cache"))
    yield
    if old is None:
        os.environ.pop("POLYTC_CACHE_DIR", None)
    else:
        os.environ["POLYTC_CACHE_DIR"] = old
