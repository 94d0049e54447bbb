"""The lazily imported kubernetes_asyncio.client resolves every name to the class the
package itself exports, and the controller's imports load no model class."""

from __future__ import annotations

import json
import subprocess
import sys

from autoscaler import _lazy_kube


def _run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_controller_imports_load_no_kubernetes_model_class() -> None:
    got = _run(
        "import json, sys, autoscaler.app\n"
        "from autoscaler._lazy_kube import loaded_models\n"
        "from kubernetes_asyncio import client\n"
        "print(json.dumps({'lazy': type(client).__name__, 'models': loaded_models()}))"
    )
    assert got == {"lazy": "LazyModule", "models": 0}


def test_every_public_name_resolves_to_the_eagerly_imported_object() -> None:
    # In a fresh interpreter: the real package (eager), then the same names through the
    # lazy modules (installed under other names, pointing at the same submodules).
    got = _run(
        "import json, sys\n"
        "from autoscaler import _lazy_kube\n"  # installs, nothing loaded yet
        "lazy = sys.modules['kubernetes_asyncio.client']\n"
        "lazy_models = sys.modules['kubernetes_asyncio.client.models']\n"
        "names = list(lazy.__all__)\n"
        "objs = {n: getattr(lazy, n) for n in names}\n"
        "model_names = list(lazy_models.__all__)\n"
        "mobjs = {n: getattr(lazy_models, n) for n in model_names}\n"
        "ok = all(getattr(sys.modules[o.__module__], n) is o for n, o in objs.items())\n"
        "import kubernetes_asyncio.client.api_client as ac\n"
        "print(json.dumps({'names': len(names), 'models': len(model_names), 'ok': ok,\n"
        "  'same_models': ac.kubernetes_asyncio.client.models is lazy_models,\n"
        "  'v1pod': mobjs['V1Pod'].__name__, 'version': lazy.__version__}))"
    )
    assert got["ok"] is True and got["same_models"] is True
    assert got["v1pod"] == "V1Pod"
    assert int(str(got["names"])) > 800 and int(str(got["models"])) > 700
    assert got["version"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    from kubernetes_asyncio import client

    if isinstance(client, _lazy_kube.LazyModule):
        try:
            client.NoSuchApi  # noqa: B018
        except AttributeError as err:
            assert "NoSuchApi" in str(err)
        else:
            raise AssertionError("expected AttributeError")


def test_install_does_nothing_once_the_client_is_imported() -> None:
    assert _lazy_kube.install() is False


def test_the_lazy_packages_have_a_package_spec() -> None:
    import importlib.util

    spec = importlib.util.find_spec("kubernetes_asyncio.client")
    assert spec is not None and spec.submodule_search_locations
    assert importlib.util.find_spec("kubernetes_asyncio.client.models.v1_pod") is not None
