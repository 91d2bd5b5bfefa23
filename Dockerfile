# One image for both services; the command picks which one runs (docker-compose.yml, deploy/kubernetes/).
# A thin wrapper over what tests/integration/test_plain_install.py proves on every `make test`: the wheel,
# built from the sources, installed without extras into a virtual environment of its own with every
# dependency at the version and hash of requirements/runtime.txt (the versions CI tested), starts both
# services, migrates, and answers; `python -m shared.healthcheck` is the probe below.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# -- build: the wheel and the virtual environment (pip and the build backend stay here) -------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY shared ./shared
COPY agent_service ./agent_service
COPY conversation_service ./conversation_service
COPY migrations ./migrations
RUN pip wheel --no-deps --wheel-dir /dist .
COPY requirements/runtime.txt /src/requirements/runtime.txt
# The environment has no pip of its own: the build stage's pip installs into it (--python).
RUN python -m venv --without-pip /opt/venv \
 && pip --python /opt/venv/bin/python install --require-hashes --no-deps -r /src/requirements/runtime.txt \
 && pip --python /opt/venv/bin/python install --no-deps /dist/*.whl \
 && pip --python /opt/venv/bin/python check

# -- the image: the environment, the knowledge base's documents, no build tools, no installer -------------
FROM ${PYTHON_IMAGE}
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/taskforce --create-home taskforce
COPY --from=build /opt/venv /opt/venv
# The knowledge_search tool's documents: the installed package has no docs/ beside it.
COPY README.md /opt/taskforce/knowledge/README.md
COPY docs/*.md /opt/taskforce/knowledge/docs/
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    AGENT_SERVICE_KNOWLEDGE_DIR=/opt/taskforce/knowledge
# Writable by the service (the SQLite files of the embedded default go to var/ here); on Kubernetes the root
# filesystem is read-only and the databases are PostgreSQL.
WORKDIR /var/lib/taskforce
USER 10001:10001
EXPOSE 8000 8001
# SIGTERM starts the drain (shared/serving.py): listeners close, streams end, replies get SHUTDOWN_GRACE_S
# (8 s by default), a --workers parent kills what is left 5 s later (shared/workers.py). Give the container
# more than that to stop: docker-compose.yml's stop_grace_period, Kubernetes' terminationGracePeriodSeconds.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 CMD ["python", "-m", "shared.healthcheck"]
CMD ["python", "-m", "conversation_service", "--host", "0.0.0.0", "--port", "8000"]
