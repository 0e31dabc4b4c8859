"""Fixtures of the Python package tests (tests/python). Run by ctest
(tests/CMakeLists.txt: python.pytest) with the build tree's package first on
PYTHONPATH, or by hand: PYTHONPATH=build/python .venv/bin/python -m pytest tests/python"""
import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def tiny_onnx():
    return os.path.join(ROOT, "examples", "tiny_cnn.onnx")


@pytest.fixture(scope="session")
def plugin_dir():
    d = os.environ.get("KILN_TEST_PLUGIN_DIR") or os.path.join(ROOT, "build", "plugins")
    return d


@pytest.fixture(scope="session")
def has_cuda():
    import kiln
    try:
        kiln.backend_info("cuda")
        return True
    except kiln.Error:
        return False


@pytest.fixture()
def rng():
    return np.random.default_rng(1234)   # fixed seed: every test is deterministic


def make_model(path, nodes, inputs, outputs, initializers=(), custom_domain=True):
    import onnx
    from onnx import helper
    g = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", 17)]
    if custom_domain:
        opsets.append(helper.make_opsetid("kiln.plugins", 1))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    onnx.save(m, path)
    return path
