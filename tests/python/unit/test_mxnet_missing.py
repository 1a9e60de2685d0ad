"""Without MXNet, `import troika.mxnet` raises ImportError saying what to install (the Python
the unit tests run with, Debian's, has no MXNet; its tests run in build/venv-mxnet)."""

import importlib.util

import pytest


def test_troika_mxnet_without_mxnet_says_how_to_install_it():
    if importlib.util.find_spec("mxnet") is not None:
        pytest.skip("this Python has MXNet")
    with pytest.raises(ImportError, match=r"troika\.mxnet needs MXNet.*mxnet==1\.9\.1.*numpy<1\.24"):
        import troika.mxnet  # noqa: F401
