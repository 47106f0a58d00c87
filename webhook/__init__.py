"""gpu-admission: a Kubernetes admission webhook that makes GPU workloads right."""

__version__ = "0.1.0"
