# The package is imported before any test module: importing autoscaler first installs the
# lazy kubernetes_asyncio.client (autoscaler/_lazy_kube.py), so the suite runs the client
# as the controller does.
import autoscaler  # noqa: F401
