"""Fixtures shared by the Python tests."""
import os

import pytest


@pytest.fixture
def built_tool():
    """find(name): the path of the qfuse tool `name` built next to $QFUSE_LIB (scripts/run-pytest
    sets it to build/libqfuse.so); the test is skipped, saying so, where it is not built."""
    def find(name):
        lib = os.environ.get("QFUSE_LIB", "")
        path = os.path.join(os.path.dirname(lib), name)
        if not os.path.exists(path):
            pytest.skip("%s is not built next to %s (make)" % (name, lib))
        return path
    return find
