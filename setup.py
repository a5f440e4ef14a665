"""Package discovery only; everything else lives in pyproject.toml.

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



class build_py_with_lmeval_hook(build_py):
    """Also install precision_lab_lmeval.pth, which registers the lm-eval model 'replayssm' at
    interpreter start-up (lm-eval 0.4.13 has no plug-in discovery; see evals/lmeval_plugin.py).
    Editable installs do not copy it: run `python -m precision_lab.evals.lmeval_plugin --install`."""

    PTH = "precision_lab_lmeval.pth"

    def run(self):
        super().run()
        (Path(self.build_lib) / self.PTH).write_text(
            "import precision_lab.evals.lmeval_plugin as _pl_lmeval; _pl_lmeval.install()\n")

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / self.PTH)]


setup(packages=packages, package_dir=package_dir, cmdclass={"build_py": build_py_with_lmeval_hook})
