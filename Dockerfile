# cqlstream server image: the HTTP server with the embedded Spark bridge (Java 17) and the live demo.
#
#   docker build --network host -t cqlstream:local .                  # dependencies from PyPI
#   docker build --network none -t cqlstream:local \
#       --build-arg BASE_IMAGE=cqlstream-base:local .                 # offline: local base + build/wheelhouse
#
# BASE_IMAGE is any Debian-based image with python3 and python3-venv of the same minor version as the
# wheels (python:3.11-slim-bookworm, or cqlstream-base:local from scripts/docker_base.sh). When the build
# context holds build/wheelhouse/*.whl (scripts/docker_smoke.sh makes it), every Python package comes
# from there with --no-index; otherwise from PyPI.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- build: the project's wheel, installed with its dependencies into /opt/venv ----
FROM ${BASE_IMAGE} AS build
# two venvs: /opt/venv is what the runtime stage gets; /opt/build-tools only builds the wheel
RUN python3 -m venv /opt/venv && python3 -m venv /opt/build-tools
WORKDIR /src
# The wheelhouse is optional: "wheelhous[e]" is a pattern that may match nothing, which COPY accepts
# when another source (pyproject.toml) matches, so a checkout without build/wheelhouse still builds.
COPY pyproject.toml build/wheelhous[e] /wheelhouse/
# Dependencies first (read from pyproject.toml), so a source change does not reinstall them. With a
# wheelhouse, /pip-env makes pip offline (pip reads PIP_NO_INDEX and PIP_FIND_LINKS from the environment).
RUN if ls /wheelhouse/*.whl >/dev/null 2>&1; then echo "export PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheelhouse" >/pip-env; \
    else : >/pip-env; fi \
    && . /pip-env \
    && /opt/build-tools/bin/pip install --no-cache-dir "setuptools>=70.1" \
    && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/wheelhouse/pyproject.toml', 'rb'))['project']['dependencies']))" \
        >/requirements.txt \
    && /opt/venv/bin/pip install --no-cache-dir -r /requirements.txt
COPY . .
# setuptools>=70.1 builds the wheel by itself (no `wheel` package); the wheel, not the source, is installed
RUN . /pip-env \
    && /opt/build-tools/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation -w /dist . \
    && /opt/venv/bin/pip install --no-cache-dir /dist/cqlstream-*.whl \
    && /opt/venv/bin/cqlstream --help >/dev/null

# ---- runtime: Python, a Java 17 runtime for Spark, the venv; no source, no build tools ----
FROM ${BASE_IMAGE}
# The local base image has Java already; a python:slim base gets Debian's JRE. JAVA_HOME points at it
# through /opt/java, whatever the architecture suffix of the JVM folder. The JRE is not pinned: its
# version is the base release's current one.
# hadolint ignore=DL3008
RUN if ! command -v java >/dev/null; then \
        mkdir -p /usr/share/man/man1 \
        && apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java \
    && useradd --system --no-log-init --create-home --home-dir /home/cqlstream --uid 10001 \
        --user-group --shell /usr/sbin/nologin cqlstream \
    && mkdir -p /data /checkpoints \
    && chown cqlstream:cqlstream /data /checkpoints
COPY --from=build /opt/venv /opt/venv
ENV JAVA_HOME=/opt/java \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CQLSTREAM_PORT=8000
# numeric, so a runtime that checks runAsNonRoot can tell without /etc/passwd
USER 10001:10001
# Spark writes its scratch files (warehouse, metastore) into the working folder
WORKDIR /home/cqlstream
# /data: the server's catalog (--data-dir); /checkpoints: Spark streaming checkpoints
VOLUME ["/data", "/checkpoints"]
EXPOSE 8000
# CQLSTREAM_PORT follows a --port other than 8000 (docker-compose.yml sets both)
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('CQLSTREAM_PORT', '8000'), timeout=4)"]
CMD ["cqlstream", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data", "--demo"]
