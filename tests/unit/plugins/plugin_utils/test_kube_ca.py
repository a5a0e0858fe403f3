"""kube_ca: the CA public key hash kubeadm join pins, checked against openssl's own pipeline (the command kubeadm's
documentation gives) on certificates made by openssl, so the two implementations are independent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.cluster.plugins.filter.kube import kube_ca_cert_hash
from ansible_collections.gpuops.cluster.plugins.plugin_utils import kube_ca

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to compare with")


def make_ca(tmp_path, key_args: list[str]) -> str:
    key, crt = tmp_path / "ca.key", tmp_path / "ca.crt"
    subprocess.run(["openssl", "req", "-x509", *key_args, "-nodes", "-days", "1", "-subj", "/CN=kubernetes",
                    "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    return str(crt)


def openssl_hash(crt: str) -> str:
    out = subprocess.run(["bash", "-c", f"set -o pipefail; openssl x509 -pubkey -noout -in {crt} "
                          "| openssl pkey -pubin -outform der | sha256sum"], check=True, capture_output=True, text=True)
    return "sha256:" + out.stdout.split()[0]


@pytest.mark.parametrize("key_args", [["-newkey", "rsa:2048"], ["-newkey", "ed25519"],
                                      ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]],
                         ids=["rsa", "ed25519", "ecdsa"])
def test_hash_equals_openssls_for_every_key_type_kubeadm_makes(tmp_path, key_args):
    crt = make_ca(tmp_path, key_args)
    pem = Path(crt).read_text(encoding="ascii")
    assert kube_ca.ca_cert_hash(pem) == openssl_hash(crt)
    assert kube_ca_cert_hash(pem.encode()) == openssl_hash(crt)


def test_not_a_certificate_is_refused_by_the_filter():
    with pytest.raises(AnsibleFilterError, match="kube_ca_cert_hash: not a PEM certificate"):
        kube_ca_cert_hash("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
