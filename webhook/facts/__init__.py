"""Cluster facts: the values the cluster-aware rules read, and the sources that provide them."""
