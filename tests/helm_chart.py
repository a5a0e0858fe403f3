"""The GPU Operator chart's side of the tests, where ``helm`` cannot run: whether our values are keys the chart has,
Helm's merge of them onto the chart's defaults, and the ClusterPolicy the chart makes of the result (validated against
the CRD by tests/render/test_addons.py and tests/unit/plugins/plugin_utils/test_gpu_operator_values.py,
test_gpu_sharing.py). Test support only: the collection hands its values to Helm, which does all of this itself.
"""

from __future__ import annotations

from typing import Any

# The node-feature-discovery subchart's own values are not in the parent chart's values.yaml; these are the
# only subchart keys we set (NFD otherwise "as the chart ships it").
NFD_SUBCHART_KEYS = frozenset({("node-feature-discovery", "image", "repository")})


def unknown_keys(values: Any, chart: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Dotted paths in ``values`` that the chart's values.yaml does not have (subchart keys we set excepted)."""
    if not isinstance(values, dict):
        return []
    found = []
    for key, value in values.items():
        here = (*path, key)
        if any(here == allowed[: len(here)] for allowed in NFD_SUBCHART_KEYS):
            continue
        if not isinstance(chart, dict) or key not in chart:
            found.append(".".join(here))
            continue
        if isinstance(chart[key], dict) and chart[key]:
            found.extend(unknown_keys(value, chart[key], here))
    return found


def merge(base: Any, override: Any) -> Any:
    """Helm's merge of a values override onto the chart's defaults (maps merge, everything else replaces)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base.get(key), value)
        return out
    return override


# ClusterPolicySpec sections the chart's clusterpolicy template fills from values of the same name.
CLUSTER_POLICY_SECTIONS = (
    "operator", "daemonsets", "driver", "toolkit", "devicePlugin", "dcgmExporter", "dcgm", "nodeStatusExporter",
    "gfd", "mig", "migManager", "psa", "validator", "gds", "gdrcopy", "sandboxWorkloads", "vfioManager",
    "sandboxDevicePlugin", "vgpuManager", "vgpuDeviceManager", "cdi", "kataManager", "ccManager", "hostPaths",
)
# Values the chart consumes itself instead of passing them into the ClusterPolicy.
# (The operator section is the operator Deployment's own; only _OPERATOR_SPEC_KEYS reach the CR.)
_CHART_ONLY = {"driver": ("nvidiaDriverCRD",)}
_OPERATOR_SPEC_KEYS = ("defaultRuntime", "runtimeClass", "initContainer", "use_ocp_driver_toolkit")


def cluster_policy(effective_values: dict, name: str = "cluster-policy") -> dict:
    """The ClusterPolicy the chart creates from ``effective_values`` (chart defaults merged with ours).

    A stand-in for ``helm template``, which cannot run here: it follows the chart's clusterpolicy template
    section by section (``.Values.<section>`` -> ``spec.<section>``), dropping the keys only the chart reads.
    """
    spec: dict[str, Any] = {}
    for section in CLUSTER_POLICY_SECTIONS:
        if section not in effective_values:
            continue
        value = effective_values[section]
        if section == "operator":
            value = {key: value[key] for key in _OPERATOR_SPEC_KEYS if key in value}
        elif isinstance(value, dict):
            value = {key: item for key, item in value.items() if key not in _CHART_ONLY.get(section, ())}
            if section == "driver":
                value["useNvidiaDriverCRD"] = bool((effective_values["driver"].get("nvidiaDriverCRD") or {})
                                                   .get("enabled"))
            if section == "devicePlugin" and isinstance(value.get("config"), dict):
                value["config"] = {key: value["config"][key] for key in ("name", "default") if key in value["config"]}
        spec[section] = value
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": name}, "spec": spec}
