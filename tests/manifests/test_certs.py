"""Generated certificates serve TLS that a client trusting only the CA accepts."""

from __future__ import annotations

import datetime as dt
import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509

from webhook.certs.generate import SERVING_DAYS, generate


def test_serving_cert_names_every_host_and_is_signed_by_the_ca(tmp_path: Path) -> None:
    paths = generate(tmp_path, ["localhost", "127.0.0.1", "gpu-admission.gpu-admission.svc"])
    cert = x509.load_pem_x509_certificate(paths.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())

    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [
        "localhost",
        "gpu-admission.gpu-admission.svc",
    ]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert dt.timedelta(days=SERVING_DAYS) <= lifetime <= dt.timedelta(days=SERVING_DAYS + 1)


def test_private_keys_are_readable_by_the_owner_only(tmp_path: Path) -> None:
    paths = generate(tmp_path, ["localhost"])
    for key in (paths.key, paths.ca_key):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600


def _cli(*args: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from webhook.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def test_generate_never_replaces_a_ca_unless_forced_and_lists_what_it_wrote(
    tmp_path: Path,
) -> None:
    code, out, _ = _cli("certs", "generate", "--out", str(tmp_path), "--hosts", "localhost")
    assert code == 0
    for name in ("ca.crt", "ca.key", "tls.crt", "tls.key"):
        assert str(tmp_path / name) in out
    ca = (tmp_path / "ca.crt").read_bytes()

    code, _, err = _cli("certs", "generate", "--out", str(tmp_path), "--hosts", "localhost")
    assert code == 2
    assert "already holds a CA" in err and "--force" in err
    assert (tmp_path / "ca.crt").read_bytes() == ca  # untouched

    code, _, _ = _cli("certs", "generate", "--out", str(tmp_path), "--if-missing")
    assert code == 0 and (tmp_path / "ca.crt").read_bytes() == ca
    (tmp_path / "tls.key").unlink()  # incomplete: --if-missing cannot keep it as it is
    code, _, err = _cli("certs", "generate", "--out", str(tmp_path), "--if-missing")
    assert code == 2 and "it lacks tls.key" in err and "--force" in err
    code, _, _ = _cli("certs", "generate", "--out", str(tmp_path), "--force")
    assert code == 0 and (tmp_path / "ca.crt").read_bytes() != ca


def test_inject_errors_name_the_option_and_the_path(tmp_path: Path) -> None:
    bad = tmp_path / "x.pem"
    bad.write_text("junk")
    code, _, err = _cli("certs", "inject", "--ca", str(bad), "--file", str(tmp_path / "w.yaml"))
    assert code == 2 and err.startswith(f"gpu-admission: --ca {bad}: not a PEM certificate")
    code, _, err = _cli("certs", "inject", "--ca", str(tmp_path / "missing.crt"))
    assert code == 2 and f"--ca {tmp_path / 'missing.crt'}: cannot read it: no such file" in err
    paths = generate(tmp_path / "c", ["localhost"])
    code, _, err = _cli("certs", "inject", "--ca", str(paths.ca_cert), "--file", "nowhere.yaml")
    assert code == 2 and "--file nowhere.yaml: no such file" in err
    broken = tmp_path / "broken.yaml"
    broken.write_text("webhooks: [unclosed\n")
    code, _, err = _cli("certs", "inject", "--ca", str(paths.ca_cert), "--file", str(broken))
    assert code == 2 and f"--file {broken}: not valid YAML at line 2" in err
    assert "Traceback" not in err


def test_version_is_the_installed_distributions(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    from webhook.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"gpu-admission {version('gpu-admission')}\n"
