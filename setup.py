"""pip install . builds libqfuse with the project's Makefile (`make lib`: qfuse-gen, the generated
registry and libqfuse.so; the CUDA toolkit and scripts/install-deps' packages must be present)
and ships the library inside the package, where qfuse._lib finds it."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildWithLib(build_py):
    def run(self):
        build_dir = os.environ.get("BUILD_DIR", "build")
        subprocess.check_call(["make", "-C", ROOT, "lib", "BUILD_DIR=" + build_dir])
        super().run()
        lib = os.path.join(ROOT, build_dir, "libqfuse.so")
        dest = os.path.join(self.build_lib, "qfuse", "libqfuse.so")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.realpath(lib), dest)


class BinaryDistribution(Distribution):
    """The package ships a compiled library: the wheel is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithLib}, distclass=BinaryDistribution)
