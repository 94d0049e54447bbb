"""``kubernetes_asyncio.client`` without importing every API and model class up front.

The generated package's ``client/__init__.py`` imports all of its ~70 API classes and
~770 model classes (37 MB of RSS, a third of the controller's import baseline), of which
the controller uses a handful. `install` registers ``kubernetes_asyncio.client``, its
``models`` and its ``api`` as modules that import a name's own submodule
on first access, from the very ``from <submodule> import <Name>`` lines of the package's
``__init__.py`` files (so every public name resolves to the same object it would have
been, and ``dir()`` lists them all). Submodule imports (``kubernetes_asyncio.client.
exceptions`` ...) work as before. `install` does nothing once the real package is
imported (then the names are all loaded anyway).

Installed by ``autoscaler/__init__.py``, i.e. before any ``autoscaler`` module imports
``kubernetes_asyncio``. benchmarks/bench_rss.py measures it.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import re
import sys
import types
from typing import Any

_FROM = re.compile(r"^from (kubernetes_asyncio\.client[\w.]*) import (\w+)\s*$", re.M)
_VERSION = re.compile(r"^__version__ = [\"']([^\"']+)[\"']", re.M)
PACKAGES = (
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.client.models",
    "kubernetes_asyncio.client.api",
)


class LazyModule(types.ModuleType):
    """A package whose public names are imported from their submodules on first use."""

    def __init__(self, name: str, path: str, names: dict[str, str]) -> None:
        super().__init__(name)
        self.__path__ = [path]
        self.__file__ = f"{path}/__init__.py"
        self.__package__ = name
        spec = importlib.machinery.ModuleSpec(name, None, origin=self.__file__, is_package=True)
        spec.submodule_search_locations = [path]
        self.__spec__ = spec
        self._lazy_names = names

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if "kubernetes_asyncio" not in sys.modules:
            # the parent package first, as any import of a submodule would (its
            # __init__ imports config, which imports names from the client)
            importlib.import_module("kubernetes_asyncio")
        module = self._lazy_names.get(attr)
        if module is None:
            try:
                value: Any = importlib.import_module(f"{self.__name__}.{attr}")
            except ModuleNotFoundError:
                raise AttributeError(
                    f"module {self.__name__!r} has no attribute {attr!r}"
                ) from None
        else:
            value = getattr(importlib.import_module(module), attr)
        setattr(self, attr, value)
        return value

    def __dir__(self) -> list[str]:
        return sorted(set(self._lazy_names) | set(self.__dict__))


def install() -> bool:
    """Register the lazy modules; False when kubernetes_asyncio.client is already
    imported (or not installed)."""
    if PACKAGES[0] in sys.modules:
        return False
    try:
        spec = importlib.util.find_spec("kubernetes_asyncio")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    root = next(iter(spec.submodule_search_locations))
    modules: list[LazyModule] = []
    for name in PACKAGES:
        path = root + name[len("kubernetes_asyncio") :].replace(".", "/")
        try:
            with open(f"{path}/__init__.py", encoding="utf-8") as f:
                source = f.read()
        except OSError:
            return False
        names = {attr: module for module, attr in _FROM.findall(source)}
        if not names:  # not the generated layout this expects: leave the package alone
            return False
        module = LazyModule(name, path, names)
        version = _VERSION.search(source)
        setattr(module, "__all__", list(names))  # noqa: B010  (a module attribute)
        if version:
            setattr(module, "__version__", version.group(1))  # noqa: B010
        modules.append(module)
    for module in modules:
        sys.modules[module.__name__] = module
    client, models, api = modules
    client.models = models  # type: ignore[attr-defined]
    client.api = api  # type: ignore[attr-defined]
    return True


def loaded_models() -> int:
    """How many model modules are imported (tests, benchmarks)."""
    prefix = PACKAGES[1] + "."
    return sum(1 for m in sys.modules if m.startswith(prefix))
