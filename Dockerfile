# Lyra's image: the `lyra` command (operator, extender, emulator), non-root, from the locked dependencies (uv.lock).
# The same recipe as `make image` (lyra image build, no container engine needed; lyra/imagespec/recipe.py): Debian
# bookworm, Debian's Python 3.11, `uv sync --locked --no-dev` into /opt/lyra (no dev groups, no `report` extra, so
# no plotting library), user 65532, entrypoint `lyra`. tests/unit/deploy/test_image_recipes.py holds the two
# recipes to the same base, Python, lock, user and entrypoint. Build: docker build -t lyra:0.1.0 .

# -- build: a virtual environment with Lyra and its locked runtime dependencies ----------------------------------
FROM debian:12.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=ghcr.io/astral-sh/uv:0.13.8 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy UV_PYTHON_DOWNLOADS=never UV_PROJECT_ENVIRONMENT=/opt/lyra \
    UV_PYTHON=/usr/bin/python3.11
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-dev --no-editable --no-install-project
COPY src ./src
RUN uv sync --locked --no-dev --no-editable

# -- runtime: Debian's Python and the environment only, as an unprivileged user ------------------------------------
FROM debian:12.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3=3.11.2-1+b1 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/lyra /opt/lyra
ENV PATH=/opt/lyra/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 8080 8888
ENTRYPOINT ["lyra"]
CMD ["--help"]
