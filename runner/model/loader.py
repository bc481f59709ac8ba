"""Loading the application's ``Runner`` from ``module:attr`` or ``path/to/file.py:attr``."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from runner.errors import JobDefinitionError
from runner.model.app import Runner
from runner.settings import ConfigError


def load_app(spec: str | None) -> Runner:
    if not spec:
        raise ConfigError("no app given: use --app module:attr or path/to/file.py:attr, or RUNNER_APP")
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ConfigError(f"--app must look like module:attr or path/to/file.py:attr, got {spec!r}")
    try:
        if target.endswith(".py") or "/" in target or "\\" in target:
            path = Path(target)
            if not path.is_file():
                raise ConfigError(f"app file not found: {target}")
            name = f"_runner_app_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            if module_spec is None or module_spec.loader is None:
                raise ConfigError(f"cannot load {target} as a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            # the file's own folder is importable, as when running it with python
            sys.path.insert(0, str(path.resolve().parent))
            module_spec.loader.exec_module(module)
        else:
            if "" not in sys.path and "." not in sys.path:
                sys.path.insert(0, "")
            module = importlib.import_module(target)
    except (ConfigError, JobDefinitionError):
        raise
    except SyntaxError as exc:
        raise ConfigError(f"cannot import app {spec!r}: SyntaxError: {exc.msg} "
                          f"({exc.filename}, line {exc.lineno})") from exc
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ConfigError(f"cannot import app {spec!r}: {type(exc).__name__}: {first}") from exc
    app = getattr(module, attr, None)
    if app is None:
        raise ConfigError(f"cannot import app {spec!r}: {target} has no attribute {attr!r}")
    if not isinstance(app, Runner):
        raise ConfigError(f"{spec!r} is a {type(app).__name__}, not a runner.Runner")
    return app
