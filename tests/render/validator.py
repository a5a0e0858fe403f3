"""Generic validation of rendered objects, strict, at the pinned Kubernetes version.

* Core and built-in API kinds: ``kubernetes-validate`` (strict: unknown fields refused) at ``kube_version``
  from inventories/cluster.
* Custom resources: the CRD's ``openAPIV3Schema`` from ../shared/data/crds or ../shared/data/gpu-operator
  (jsonschema); unknown fields refused where the CRD does not allow them.
* Configuration APIs kubernetes-validate does not cover (kubeadm.k8s.io/v1beta4, kubelet.config.k8s.io/v1beta1)
  and CRs whose CRD is not in ../shared/data (operator.tigera.io/v1): the schemas in schemas/, written from
  the upstream Go types named at the top of each file.

An object whose apiVersion/kind has none of these is a problem, not a pass: add its schema.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import yaml
from conftest import INVENTORY, LOADER, SHARED_DATA

SCHEMAS = Path(__file__).resolve().parent / "schemas"
CRD_DIRS = ("crds", "gpu-operator")
# kubernetes-validate lists its schema folders and reads (json.load) the kind's schema and the version's
# _definitions.json on every call, the same files for every object: read each once per session (the tests validate
# some hundreds of objects). Read-only use: validate() only reads what they return.
kubernetes_validate.utils.all_versions = cache(kubernetes_validate.utils.all_versions)
kubernetes_validate.utils.schema_contents = cache(kubernetes_validate.utils.schema_contents)


@cache
def kube_version() -> str:
    text = (INVENTORY / "group_vars" / "k8s_cluster" / "k8s-cluster.yml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["kube_version"]


@cache
def local_schemas() -> dict[tuple[str, str], dict]:
    found = {}
    for path in sorted(SCHEMAS.glob("*.yaml")):
        group_version = path.stem.replace("_", "/")
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        for kind, schema in document["kinds"].items():
            found[(group_version, kind)] = {**schema, "$defs": document.get("$defs", {})}
    return found


@cache
def crd_schemas() -> dict[tuple[str, str], dict]:
    found = {}
    for folder in CRD_DIRS:
        for path in sorted((SHARED_DATA / folder).glob("*.yaml")):
            for document in yaml.load_all(path.read_text(encoding="utf-8"), Loader=LOADER):
                if not document or document.get("kind") != "CustomResourceDefinition":
                    continue
                spec = document["spec"]
                for version in spec["versions"]:
                    key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                    found[key] = version["schema"]["openAPIV3Schema"]
    return found


def _schema_errors(obj: dict, schema: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, error.absolute_path)) or '.'}: {error.message}" for error in validator.iter_errors(obj)
    ]


def is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return "/" not in api_version or (group.endswith(".k8s.io") and not group.startswith(("kubeadm.", "kubelet.")))


def problems(obj: dict) -> list[str]:
    """Validation problems of one rendered object (empty: valid)."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    key = (api_version, kind)
    if key in local_schemas():
        return _schema_errors(obj, local_schemas()[key])
    if key in crd_schemas():
        return _schema_errors(obj, crd_schemas()[key])
    if is_builtin(api_version) or api_version in ("apps/v1", "batch/v1", "policy/v1", "autoscaling/v2"):
        try:
            kubernetes_validate.validate(obj, kube_version(), strict=True)
        except kubernetes_validate.utils.ValidationError as exc:
            return [str(exc).splitlines()[0]]
        except kubernetes_validate.utils.SchemaNotFoundError as exc:
            return [f"no kubernetes-validate schema: {exc}"]
        return []
    return [f"no schema for {api_version} {kind}: add its CRD to ../shared/data or a schema to tests/render/schemas"]
