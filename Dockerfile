# Small, non-root image; dependencies come from pyproject.toml.
FROM python:3.11.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN python -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir .

FROM python:3.11.11-slim-bookworm
COPY --from=build /opt/venv /opt/venv
COPY rules /etc/gpu-admission/rules
USER 65532:65532
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
EXPOSE 8443 8081
ENTRYPOINT ["gpu-admission"]
CMD ["serve", "--host", "0.0.0.0", "--rules", "/etc/gpu-admission/rules", "--cert", "/etc/gpu-admission/tls/tls.crt", "--key", "/etc/gpu-admission/tls/tls.key"]
