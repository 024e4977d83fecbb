# Lyra's image: the `lyra` command (operator, extender, emulator), non-root, from the locked dependencies (uv.lock).
# Build: docker build -t lyra:0.1.0 .   (docs/operations.md; no container engine runs in this project's CI, so a unit
# test checks this file's shape instead: pinned bases, non-root user, entrypoint).

# -- build: a virtual environment with Lyra and its locked runtime dependencies (no dev tools) --------------------
FROM python:3.11.14-slim-bookworm AS build
COPY --from=ghcr.io/astral-sh/uv:0.13.8 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/opt/lyra
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-dev --no-install-project
COPY src ./src
RUN uv sync --locked --no-dev --no-editable

# -- runtime: the environment only, as an unprivileged user ------------------------------------------------------
FROM python:3.11.14-slim-bookworm
RUN groupadd --gid 65532 lyra && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin lyra
COPY --from=build /opt/lyra /opt/lyra
ENV PATH=/opt/lyra/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
USER 65532:65532
EXPOSE 8080 8888
ENTRYPOINT ["lyra"]
CMD ["--help"]
