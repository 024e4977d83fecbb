"""Keys, certificates and tokens of one local control plane, generated fresh for every ``up``.

A private CA signs one serving certificate for 127.0.0.1 that the API server, the controller-manager and the
scheduler all present, so every client (kubectl, the Python client, readiness probes) verifies TLS for real.
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
    serving_key = ec.generate_private_key(ec.SECP256R1())
    serving_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(serving_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.DNSName("kubernetes"),
                    x509.DNSName("kubernetes.default"),
                    x509.DNSName("kubernetes.default.svc"),
                    x509.DNSName("kubernetes.default.svc.cluster.local"),
                    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
                    x509.IPAddress(ipaddress.IPv4Address(SERVICE_IP)),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    # RSA for the service-account signing key: RS256 is what every token consumer accepts.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    paths = Credentials(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
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
    _write_private(paths.service_account_key, _private_pem(sa_key))
    _write_private(
        paths.service_account_public_key,
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo),
    )
    users = (paths.admin, paths.controller_manager, paths.scheduler, paths.kwok)
    lines = [_token_line(user) for user in users]
    _write_private(paths.token_file, ("\n".join(lines) + "\n").encode())
    return paths


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
