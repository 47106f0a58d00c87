"""What the tests share: the paths of the repository, AdmissionReviews and their answers, the
server in a subprocess, a raw TLS client, the fake API server, the routing library, builders of
the objects several topics use (pods, Facts with every field set). Test modules import from
here, never from each other or from a conftest (tests/project/test_test_layout.py keeps it so);
fixtures live in the conftests.
"""
