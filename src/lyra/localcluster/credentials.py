"""Keys, certificates and tokens of one local control plane, generated fresh for every ``up``.

A private CA signs one serving certificate for 127.0.0.1 that the API server, the controller-manager and the
scheduler all present, so every client (kubectl, the Python client, readiness probes) verifies TLS for real. It also
signs a serving certificate for the scheduler extender and a client certificate kube-scheduler presents to it, used
when the extender URL is ``https``.
Clients authenticate with static bearer tokens (``--token-auth-file``): the admin token is in
``system:masters``; the controller-manager and the scheduler use the user names that Kubernetes' bootstrap RBAC
policy already grants their rights to, so authorization is the real Node,RBAC chain.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

SERVICE_IP = "10.96.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class User:
    """One identity in the token file; the token authenticates it, RBAC decides what it may do."""

    name: str
    groups: tuple[str, ...]
    token: str


@dataclass(frozen=True)
class Credentials:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    extender_cert: Path
    extender_key: Path
    scheduler_client_cert: Path
    scheduler_client_key: Path
    service_account_key: Path
    service_account_public_key: Path
    token_file: Path
    admin: User
    controller_manager: User
    scheduler: User
    kwok: User


def generate_credentials(directory: Path) -> Credentials:
    """Write a CA, a serving certificate, the service-account key pair and the token file into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lyra-local-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
    loopback = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.IPv4Address("127.0.0.1"))]
    in_cluster = [
        x509.DNSName(name)
        for name in (
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
    ]
    serving_key, serving_cert = _leaf(
        ca_key, ca_name, "kube-apiserver", [*loopback, *in_cluster, x509.IPAddress(ipaddress.IPv4Address(SERVICE_IP))]
    )
    # The scheduler extender serves HTTPS on loopback when asked, and kube-scheduler presents a client certificate.
    extender_key, extender_cert = _leaf(ca_key, ca_name, "lyra-extender", loopback)
    client_key, client_cert = _leaf(ca_key, ca_name, "system:kube-scheduler", None)
    # RSA for the service-account signing key: RS256 is what every token consumer accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    paths = Credentials(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
        extender_cert=directory / "extender.crt",
        extender_key=directory / "extender.key",
        scheduler_client_cert=directory / "scheduler-client.crt",
        scheduler_client_key=directory / "scheduler-client.key",
        service_account_key=directory / "service-account.key",
        service_account_public_key=directory / "service-account.pub",
        token_file=directory / "tokens.csv",
        admin=User("lyra-admin", ("system:masters",), secrets.token_urlsafe(32)),
        controller_manager=User("system:kube-controller-manager", (), secrets.token_urlsafe(32)),
        scheduler=User("system:kube-scheduler", (), secrets.token_urlsafe(32)),
        # KWOK plays every kubelet (node status, leases, pod status, deletions); one kubelet-like identity
        # with node-wide reach does not exist in bootstrap RBAC, so it runs as a cluster admin.
        kwok=User("lyra-kwok", ("system:masters",), secrets.token_urlsafe(32)),
    )
    _write_private(paths.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths.ca_key, _private_pem(ca_key))
    _write_private(paths.serving_cert, serving_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(paths.serving_key, _private_pem(serving_key))
    for cert_path, key_path, cert, key in (
        (paths.extender_cert, paths.extender_key, extender_cert, extender_key),
        (paths.scheduler_client_cert, paths.scheduler_client_key, client_cert, client_key),
    ):
        _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        _write_private(key_path, _private_pem(key))
    _write_private(paths.service_account_key, _private_pem(sa_key))
    _write_private(
        paths.service_account_public_key,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    users = (paths.admin, paths.controller_manager, paths.scheduler, paths.kwok)
    lines = [_token_line(user) for user in users]
    _write_private(paths.token_file, ("\n".join(lines) + "\n").encode())
    return paths


def _leaf(
    ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name, common_name: str, names: list[x509.GeneralName] | None
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and a certificate signed by the CA: for serving ``names`` or, without names, a client certificate."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    usage = x509.oid.ExtendedKeyUsageOID.SERVER_AUTH if names else x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH
    builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _token_line(user: User) -> str:
    # Format: token,user,uid[,"group1,group2"]; the groups column is left out rather than left empty.
    line = f"{user.token},{user.name},{user.name}"
    return f'{line},"{",".join(user.groups)}"' if user.groups else line


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )


def _write_private(path: Path, data: bytes) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)


def issue_client_certificate(credentials: Credentials, common_name: str, cert_path: Path, key_path: Path) -> None:
    """A client certificate signed by the cluster's CA (the API server presents one to the real nodes' kubelets)."""
    ca_key = serialization.load_pem_private_key(credentials.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{credentials.ca_key} is not the EC key this module writes")
    ca_name = x509.load_pem_x509_certificate(credentials.ca_cert.read_bytes()).subject
    key, cert = _leaf(ca_key, ca_name, common_name, None)
    _write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    _write_private(key_path, _private_pem(key))


def append_users(credentials: Credentials, users: list[User]) -> None:
    """Add identities to the token file (before the API server starts: it reads the file once)."""
    with credentials.token_file.open("a", encoding="utf-8") as out:
        out.writelines(_token_line(user) + "\n" for user in users)
