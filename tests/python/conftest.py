"""Fixtures shared by the Python tests."""
import os

import pytest


@pytest.fixture
def built_tool():
    """find(name): the path of the qfuse tool `name` built next to $QFUSE_LIB (scripts/run-pytest
    sets it to build/libqfuse.so), else in this checkout's build/ (as the package finds the
    library); the test is skipped, saying so, where it is not built."""
    def find(name):
        lib = os.environ.get("QFUSE_LIB")
        folder = (os.path.dirname(os.path.abspath(lib)) if lib else
                  os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build"))
        path = os.path.normpath(os.path.join(folder, name))
        if not os.path.exists(path):
            pytest.skip("%s is not built in %s (run make)" % (name, os.path.normpath(folder)))
        return path
    return find
