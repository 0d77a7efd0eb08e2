"""Per-cluster certificates, service-account keys and kubeconfigs (Python `cryptography`).

One CA signs the apiserver's serving certificate and a client certificate per identity; RBAC then
decides what each identity may do, as in a kubeadm cluster. Keys are ECDSA P-256 (fast to make).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=7)

APISERVER_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


@dataclass(frozen=True)
class Identity:
    """A client certificate subject: CN is the user name, O entries are its groups."""

    name: str
    common_name: str
    groups: tuple[str, ...] = ()


# kube-controller-manager and kube-scheduler use their bootstrap-RBAC identities; the admin,
# kwok and the harness kubelet are cluster admins (kwokctl and envtest do the same for kwok).
IDENTITIES = (
    Identity("admin", "semipd-e2e-admin", ("system:masters",)),
    Identity("kube-controller-manager", "system:kube-controller-manager"),
    Identity("kube-scheduler", "system:kube-scheduler"),
    Identity("kwok", "semipd-e2e-kwok", ("system:masters",)),
    Identity("kubelet", "semipd-e2e-local-kubelet", ("system:masters",)),
    Identity("prometheus", "semipd-e2e-prometheus"),
)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, groups: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, g) for g in groups]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def _leaf_key_usage() -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=True,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass(frozen=True)
class Pki:
    """Paths of the files `generate` wrote."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def apiserver_cert(self) -> Path:
        return self.dir / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.dir / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def client_cert(self, identity: str) -> Path:
        return self.dir / f"{identity}.crt"

    def client_key(self, identity: str) -> Path:
        return self.dir / f"{identity}.key"


def generate(pki_dir: Path) -> Pki:
    """Write a fresh CA, apiserver serving cert, SA key pair and one client cert per identity."""
    pki_dir.mkdir(parents=True, exist_ok=True)
    pki = Pki(pki_dir)

    ca_key = _new_key()
    ca_name = _name("semipd-e2e-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write(pki.ca_key, _key_pem(ca_key), private=True)
    _write(pki.ca_cert, _cert_pem(ca_cert))

    def sign(
        subject: x509.Name,
        key: ec.EllipticCurvePrivateKey,
        builder_extra: list[x509.ExtensionType],
        usage: x509.ObjectIdentifier,
    ) -> x509.Certificate:
        b = (
            _builder(subject, ca_name, key)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_leaf_key_usage(), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )
        for ext in builder_extra:
            b = b.add_extension(ext, critical=False)
        return b.sign(ca_key, hashes.SHA256())

    api_key = _new_key()
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in APISERVER_DNS_NAMES]
    sans.append(x509.IPAddress(ipaddress.ip_address("127.0.0.1")))
    api_cert = sign(
        _name("kube-apiserver"), api_key, [x509.SubjectAlternativeName(sans)], ExtendedKeyUsageOID.SERVER_AUTH
    )
    _write(pki.apiserver_key, _key_pem(api_key), private=True)
    _write(pki.apiserver_cert, _cert_pem(api_cert))

    for ident in IDENTITIES:
        key = _new_key()
        cert = sign(_name(ident.common_name, ident.groups), key, [], ExtendedKeyUsageOID.CLIENT_AUTH)
        _write(pki.client_key(ident.name), _key_pem(key), private=True)
        _write(pki.client_cert(ident.name), _cert_pem(cert))

    sa_key = _new_key()
    _write(pki.sa_key, _key_pem(sa_key), private=True)
    _write(
        pki.sa_pub,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    return pki


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    path.write_bytes(data)
    path.chmod(0o600 if private else 0o644)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(pki: Pki, identity: str, server: str) -> str:
    """A self-contained kubeconfig (certificates inlined) for one identity."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "semipd-e2e", "cluster": {"server": server, "certificate-authority-data": _b64(pki.ca_cert)}}
        ],
        "users": [
            {
                "name": identity,
                "user": {
                    "client-certificate-data": _b64(pki.client_cert(identity)),
                    "client-key-data": _b64(pki.client_key(identity)),
                },
            }
        ],
        "contexts": [{"name": "semipd-e2e", "context": {"cluster": "semipd-e2e", "user": identity}}],
        "current-context": "semipd-e2e",
    }
    return yaml.safe_dump(doc, sort_keys=False)
