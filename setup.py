"""Package discovery only; everything else lives in pyproject.toml.

The top-level folders quant/, kernels/ and evals/ install as precision_lab.quant,
precision_lab.kernels and precision_lab.evals (their bare names collide with PyPI packages; see
DESIGN §2). setuptools' find_packages would install them under their bare names, so the package
list is built here with the prefix.
"""
from setuptools import find_packages, setup

MAPPED = {"quant": "precision_lab.quant", "kernels": "precision_lab.kernels", "evals": "precision_lab.evals"}

packages = ["precision_lab"] + [f"precision_lab.{p}" for p in find_packages("precision_lab")]
package_dir = {"precision_lab": "precision_lab"}
for folder, name in MAPPED.items():
    packages.append(name)
    package_dir[name] = folder
    for sub in find_packages(folder):
        packages.append(f"{name}.{sub}")
        package_dir[f"{name}.{sub}"] = f"{folder}/{sub.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
