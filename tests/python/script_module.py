"""load(filename): a script of scripts/ (bench_peers.py, or one without the suffix such as
get-real-weights) as a module, with scripts/ on the path as when the script runs from there, so
that its sibling modules (qf_stdout) import. Shared by the tests of the scripts."""
import importlib.machinery
import importlib.util
import os
import sys

SCRIPTS = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))


def load(filename):
    if SCRIPTS not in sys.path:
        sys.path.insert(0, SCRIPTS)
    name = filename[:-3] if filename.endswith(".py") else filename.replace("-", "_")
    loader = importlib.machinery.SourceFileLoader(name, os.path.join(SCRIPTS, filename))
    spec = importlib.util.spec_from_loader(name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
