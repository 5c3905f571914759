import os

import pytest
from hypothesis import settings

from polytc import config

from . import cuda_emu

cuda_emu.install()  # the cuda target's tests run on its emulator where there is no GPU

# the property tests draw the same examples at every run, so that a run fails for a
# change, not for a draw (a random program once sent isl into a hull it did not finish
# in 15 minutes); POLYTC_FUZZ_RANDOM=1 explores new ones
settings.register_profile("polytc", derandomize=not config.fuzz_random())
settings.load_profile("polytc")


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


@pytest.fixture
def no_gpu(monkeypatch, tmp_path):
    """The cuda target as on a machine without a GPU (whatever this one has), in this
    process and in those it starts."""
    from polytc.runtime import cuda

    monkeypatch.setenv("POLYTC_CUDA_DRIVER", str(tmp_path / "libcuda-absent.so"))
    monkeypatch.setattr(cuda, "_STATE", {})
