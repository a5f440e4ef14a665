"""Package discovery and the lm-eval start-up hook; everything else lives in pyproject.toml.

The top-level folders quant/, kernels/ and evals/ install as precision_lab.quant,
precision_lab.kernels and precision_lab.evals (their bare names collide with PyPI packages; see
docs/design.md §2). setuptools' find_packages would install them under their bare names, so the package
list is built here with the prefix.
"""
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

MAPPED = {"quant": "precision_lab.quant", "kernels": "precision_lab.kernels", "evals": "precision_lab.evals"}

packages = ["precision_lab"] + [f"precision_lab.{p}" for p in find_packages("precision_lab")]
package_dir = {"precision_lab": "precision_lab"}
for folder, name in MAPPED.items():
    packages.append(name)
    package_dir[name] = folder
    for sub in find_packages(folder):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"



# The start-up hook that registers the lm-eval model 'replayssm' in every interpreter (lm-eval 0.4.13
# has no plug-in discovery; see evals/lmeval_plugin.py, whose PTH_NAME / PTH_LINE these must equal).
LMEVAL_PTH = "precision_lab_lmeval.pth"
LMEVAL_PTH_LINE = "import precision_lab.evals.lmeval_plugin as _pl_lmeval; _pl_lmeval.install()\n"


class build_py_with_lmeval_hook(build_py):
    """A regular (wheel) install: ship the hook at the top of site-packages."""

    def run(self):
        super().run()
        (Path(self.build_lib) / LMEVAL_PTH).write_text(LMEVAL_PTH_LINE)

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / LMEVAL_PTH)]


class _AlsoShipTheHook:
    """Wraps setuptools' editable strategy: the editable wheel gets the hook too, since an editable
    install copies nothing from build_py into site-packages."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        wheel.writestr(LMEVAL_PTH, LMEVAL_PTH_LINE)


cmdclass = {"build_py": build_py_with_lmeval_hook}
try:
    from setuptools.command.editable_wheel import editable_wheel

    if hasattr(editable_wheel, "_select_strategy"):  # setuptools >= 64; otherwise: lmeval_plugin --install

        class editable_wheel_with_lmeval_hook(editable_wheel):
            def _select_strategy(self, *args, **kwargs):
                return _AlsoShipTheHook(super()._select_strategy(*args, **kwargs))

        cmdclass["editable_wheel"] = editable_wheel_with_lmeval_hook
except ImportError:
    pass

setup(packages=packages, package_dir=package_dir, cmdclass=cmdclass)
