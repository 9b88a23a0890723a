"""A throw-away CA and a server certificate for 127.0.0.1 / localhost / ::1.

Made with the ``openssl`` command when it is on PATH, else with the ``cryptography``
package when it is importable.  The CA certificate is what a client passes as
``ca_path`` (or ``verify=``).
"""

import datetime
import importlib
import ipaddress
import os
import shutil
import subprocess
from pathlib import Path


class TLSUnavailable(RuntimeError):
    pass


def available_backend():
    if shutil.which("openssl"):
        return "openssl"
    try:
        importlib.import_module("cryptography")
    except ImportError:
        return None
    return "cryptography"


def _openssl(workdir):
    ca_key = workdir / "ca.key"
    ca_crt = workdir / "ca.pem"
    key = workdir / "server.key"
    csr = workdir / "server.csr"
    crt = workdir / "server.pem"
    ext = workdir / "server.ext"

    def run(cmd):
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60)

    run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
         "-out", str(ca_crt), "-days", "2", "-subj", "/CN=vllm-simulator test CA",
         "-addext", "basicConstraints=critical,CA:TRUE",
         "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
    run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
         "-subj", "/CN=127.0.0.1"])
    ext.write_text("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n",
                   encoding="ascii")
    run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(ca_crt), "-CAkey", str(ca_key),
         "-CAcreateserial", "-out", str(crt), "-days", "2", "-extfile", str(ext)])
    return crt, key, ca_crt


def _cryptography(workdir):
    # pylint: disable=import-outside-toplevel,import-error
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vllm-simulator test CA")])
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                x509.IPAddress(ipaddress.ip_address("::1")),
                x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    crt_path = workdir / "server.pem"
    key_path = workdir / "server.key"
    ca_path = workdir / "ca.pem"
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return crt_path, key_path, ca_path


def make_certificates(workdir):
    """Write ``server.pem``, ``server.key`` and ``ca.pem`` into *workdir*; return their paths and the backend."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    os.chmod(workdir, 0o700)
    backend = available_backend()
    if backend == "openssl":
        try:
            return (*_openssl(workdir), backend)
        except (subprocess.SubprocessError, OSError):
            backend = "cryptography"
    if backend == "cryptography":
        try:
            return (*_cryptography(workdir), backend)
        except ImportError as exc:
            raise TLSUnavailable("neither the openssl command nor the cryptography package works") from exc
    raise TLSUnavailable("neither the openssl command nor the cryptography package is available")
