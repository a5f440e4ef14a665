"""precision_lab.evals — see docs/design.md §2. Installed as a subpackage of precision_lab."""
if __name__ == "evals":  # a bare `import evals` from the repo root would load a second, unrelated copy
    raise ImportError(
        "The folder 'evals/' is installed as 'precision_lab.evals'; import it under that name "
        "(pip install -e . first). A bare 'import evals' would also shadow the PyPI package 'evals'."
    )
