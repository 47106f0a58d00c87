"""Certificates: dev and self-signed serving certs, and the CA bundle in webhook configurations."""
