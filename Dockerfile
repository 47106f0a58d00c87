# Small, non-root image. Dependencies, and the setuptools and mypy that build the project:
# exactly the versions and hashes of requirements.lock (generated from pyproject.toml, see
# docs/development.md); then the project itself, built with those and nothing fetched.
# The engine's hot path is compiled with mypyc (setup.py), so this stage has a C compiler; the
# runtime stage has none.
FROM python:3.11.11-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md requirements.lock ./
COPY webhook ./webhook
ENV GPU_ADMISSION_COMPILE=1
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir --require-hashes -r requirements.lock \
    && /opt/venv/bin/pip install --no-cache-dir --no-deps --no-build-isolation .

FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/venv /opt/venv
COPY rules /etc/gpu-admission/rules
USER 65532:65532
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8443 8081
ENTRYPOINT ["gpu-admission"]
CMD ["serve", "--host", "0.0.0.0", "--rules", "/etc/gpu-admission/rules", "--cert", "/etc/gpu-admission/tls/tls.crt", "--key", "/etc/gpu-admission/tls/tls.key"]
