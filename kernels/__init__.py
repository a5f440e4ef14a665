"""precision_lab.kernels — see docs/design.md §2. Installed as a subpackage of precision_lab."""
if __name__ == "kernels":  # a bare `import kernels` from the repo root would load a second, unrelated copy
    raise ImportError(
        "The folder 'kernels/' is installed as 'precision_lab.kernels'; import it under that name "
        "(pip install -e . first). A bare 'import kernels' would also shadow the PyPI package 'kernels'. "
        "If this came from `import transformers` (it probes for Hugging Face's 'kernels' package) while "
        "the repository root is on sys.path, import precision_lab.models first (it runs that probe with "
        "the root hidden) or run from another directory."
    )
