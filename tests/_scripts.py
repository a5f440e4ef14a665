"""Load a file of ``scripts/`` as a module: the scripts are not a package, and their tests call them in-process."""
import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name):
    """``scripts/<name>.py`` as a fresh module named ``name`` (not entered in ``sys.modules``)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
