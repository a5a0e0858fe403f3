# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""The cluster CA's public key hash that `kubeadm join --discovery-token-ca-cert-hash` pins: SHA-256 of the
certificate's DER-encoded SubjectPublicKeyInfo (kubeadm's pubkeypin.Hash), computed on the controller."""

from __future__ import annotations

import hashlib

try:  # ansible-core depends on cryptography; the guard keeps the import sanity test (a bare interpreter) green
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization
except ImportError:  # pragma: no cover
    x509 = serialization = None


def ca_cert_hash(pem: str | bytes) -> str:
    """'sha256:<hex>' of the first certificate in PEM text; ValueError when it holds none, RuntimeError when the
    cryptography library is missing on the controller."""
    if x509 is None:
        raise RuntimeError("the Python library cryptography is needed on the controller (pip install cryptography)")
    data = pem.encode() if isinstance(pem, str) else pem
    cert = x509.load_pem_x509_certificate(data)
    spki = cert.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(spki).hexdigest()
