"""The package's one build step beyond pyproject.toml: the compiled kernels, built at install.

The scan and text kernels are numba functions; compiling them takes a first
run 10-20 s. The build compiles them ahead of time here instead (numba's
ahead-of-time compiler and the C toolchain, rmqdump.scan.aot.compile_to),
into extension modules beside their source, so no run after an install
compiles. A machine without a C compiler still installs: the build says so
and the commands compile on their first run, as before.
"""

import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = {"rmqdump.scan.rmqdump_scan_kernel": "rmqdump.scan.aot:SCAN", "rmqdump.text.rmqdump_text_kernel": "rmqdump.text.batches:TEXT"}


def _source_package() -> None:
    """Import rmqdump from this tree, its schemas from the top-level folder as the install maps them."""
    sys.path.insert(0, HERE)
    spec = importlib.util.spec_from_file_location("rmqdump.schemas", os.path.join(HERE, "schemas", "__init__.py"), submodule_search_locations=[os.path.join(HERE, "schemas")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["rmqdump.schemas"] = module
    spec.loader.exec_module(module)


class BuildKernels(build_ext):
    """Each extension is a kernel set compiled by numba, not C sources."""

    def build_extension(self, ext):
        _source_package()
        aot = importlib.import_module("rmqdump.scan.aot")
        kernels = aot.declared(KERNELS[ext.name])
        try:
            aot.compile_to(kernels, self.get_ext_fullpath(ext.name))
        except Exception as e:  # no C compiler, say: the commands compile on their first run instead
            print(f"rmqdump: {kernels.module} not compiled at install ({type(e).__name__}: {e}); the first run compiles it", file=sys.stderr)


setup(ext_modules=[Extension(name, sources=[], optional=True) for name in KERNELS], cmdclass={"build_ext": BuildKernels})
