"""The webhook server: HTTPS, the AdmissionReview wire format, hot reload and metrics."""
