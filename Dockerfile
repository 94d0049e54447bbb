# syntax=docker/dockerfile:1
# llm-autoscaler controller image.
#   docker build -t ghcr.io/llm-autoscaler/llm-autoscaler:0.1.0 .
# Two stages: the builder installs the pinned wheels (deploy/requirements.lock) and the
# package into a venv; the final stage copies only that venv onto the same slim base, so
# no compiler, pip cache or source tree ships. Pin the base by digest in your registry
# mirror (PYTHON_IMAGE=python:3.11.13-slim-bookworm@sha256:...).
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m venv /opt/venv
WORKDIR /src
# Dependencies first: this layer is rebuilt only when the lock file changes.
COPY deploy/requirements.lock ./requirements.lock
RUN pip install --no-deps --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
# --no-deps: everything comes from the lock; pip check fails the build if it is incomplete.
RUN pip install --no-deps . \
    && pip check \
    && python -m compileall -q /opt/venv

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="llm-autoscaler" \
      org.opencontainers.image.description="Autoscaler controller for LLM inference servers on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/llm-autoscaler/llm-autoscaler"
# Read-only root filesystem: bytecode is precompiled in the builder, nothing writes
# outside /tmp (mount an emptyDir there), HOME points into /tmp.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    AUTOSCALER_HTTP__PORT=8080 \
    AUTOSCALER_GRPC__PORT=9090
RUN groupadd --system --gid 10001 autoscaler \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
       --home-dir /nonexistent --shell /usr/sbin/nologin autoscaler
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080 9090
# For docker/compose. Kubernetes ignores HEALTHCHECK: deploy/base/deployment.yaml probes
# /healthz (liveness, startup) and /readyz (readiness) on the same port.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('AUTOSCALER_HTTP__PORT', '8080'), timeout=2)"]
ENTRYPOINT ["llm-autoscaler"]
CMD ["run"]
