"""End-to-end tests on a real control plane (kube-apiserver, etcd, controller-manager,
scheduler and kwok, built from pinned Go modules): `make e2e`."""
