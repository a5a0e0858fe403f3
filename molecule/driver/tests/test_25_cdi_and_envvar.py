"""The toolkit's CDI spec and its config.toml, on both nodes (stand-in nvidia-ctk and runtime, real dockerd).

What the ROLE controls is tested as such: the command it ran to make the spec (the stand-in nvidia-ctk records
its arguments and the sha256 of what it wrote), where and how it installed the result, the scratch it removed, the
config.toml key it set, and that dockerd hands containers to the nvidia runtime, which reads that key. What the
stand-ins compute themselves (the spec's content, from a fixture; which devices NVIDIA's envvar rule would grant)
is checked only in the tests named `test_standin_contract_*`: they hold the stand-ins to the real programs'
documented behaviour and prove nothing about the role.

The stand-in's CDI spec is checked against the CDI JSON schema's rules, written here as a minimal schema of our own
(not a copy) from the upstream schema at a pinned commit:
https://github.com/cncf-tags/container-device-interface/blob/9c1a1bdee4ebb2e79015f54eb2b489c054cd0f48/schema/schema.json
https://github.com/cncf-tags/container-device-interface/blob/1537b1dbd72ca3c971cdc498f558f986e0b9ffa1/schema/defs.json
plus the name rules of the spec (SPEC.md: kind is vendor/class, device names are alphanumeric with _.:-).
"""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
import yaml

# The toolkit nodes (gpuops-driver-deb12-cuda has the driver stand-ins only).
testinfra_hosts = ["gpuops-driver-deb12", "gpuops-driver-deb13"]

SPEC = "/etc/cdi/nvidia.yaml"
CONFIG = "/etc/nvidia-container-runtime/config.toml"
STANDIN_LOG = "/var/log/gpuops-nvidia-runtime-standin.log"
CTK_LOG = "/var/log/gpuops-nvidia-ctk-standin.log"
KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
IMAGE = "gpuops-test/busybox:1"
FIXTURE_UUIDS = ["GPU-0a0a0a0a-0000-4000-8000-000000000000", "GPU-0a0a0a0a-0000-4000-8000-000000000001"]

KIND = r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?$"
MODE = 0o644
STRINGS = {"type": "array", "items": {"type": "string"}}
PATH = {"type": "string", "pattern": "^/"}
EDITS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "env": {"type": "array", "items": {"type": "string", "pattern": "^[^=]+="}},
        "deviceNodes": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path"],
                "properties": {
                    "path": PATH,
                    "hostPath": PATH,
                    "permissions": {"type": "string"},
                    "type": {"type": "string"},
                    "major": {"type": "integer"},
                    "minor": {"type": "integer"},
                    "uid": {"type": "integer", "minimum": 0},
                    "gid": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "mounts": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["hostPath", "containerPath"],
                "properties": {"hostPath": PATH, "containerPath": PATH, "options": STRINGS, "type": {"type": "string"}},
                "additionalProperties": False,
            },
        },
        "hooks": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["hookName", "path"],
                "properties": {
                    "hookName": {
                        "enum": [
                            "prestart",
                            "createRuntime",
                            "createContainer",
                            "startContainer",
                            "poststart",
                            "poststop",
                        ]
                    },
                    "path": PATH,
                    "args": STRINGS,
                    "env": STRINGS,
                    "timeout": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
            },
        },
        "intelRdt": {"type": "object"},
        "additionalGids": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    },
}
CDI_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["cdiVersion", "kind", "devices"],
    "properties": {
        "cdiVersion": {"type": "string", "pattern": r"^0\.[3-8]\.0$"},
        "kind": {"type": "string", "pattern": KIND},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "devices": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["name", "containerEdits"],
                "properties": {
                    "name": {"type": "string", "pattern": r"^[a-zA-Z0-9]([a-zA-Z0-9_.:-]*[a-zA-Z0-9])?$"},
                    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
                    "containerEdits": EDITS,
                },
                "additionalProperties": False,
            },
        },
        "containerEdits": EDITS,
    },
    "additionalProperties": False,
}


def test_the_schema_check_can_fail():
    good = {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "0", "containerEdits": {}}]}
    jsonschema.validate(good, CDI_SCHEMA)
    for bad in (
        {**good, "kind": "gpu"},
        {**good, "devices": []},
        {**good, "devices": [{"name": "all"}]},
        {**good, "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"hostPath": "/dev/x"}]}}]},
        {**good, "devices": [{"name": "0", "containerEdits": {"hooks": [{"hookName": "later", "path": "/x"}]}}]},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, CDI_SCHEMA)


def _ctk_generate_calls(host) -> list[dict]:
    lines = host.file(CTK_LOG).content_string.splitlines() if host.file(CTK_LOG).exists else []
    return [r for r in map(json.loads, filter(None, lines)) if r["args"][:2] == ["cdi", "generate"]]


def test_role_installs_what_nvidia_ctk_cdi_generate_wrote_to_its_scratch_file(host):
    """The role's part: `nvidia-ctk cdi generate --output=<scratch dir>/nvidia.yaml`, exactly those arguments,
    then the file installed at the spec path, root 0644, byte for byte what nvidia-ctk wrote (its content is the
    stand-in's: see the contract test below), and the scratch directory removed."""
    generated = _ctk_generate_calls(host)
    assert generated, f"nvidia-ctk cdi generate was never called (no record in {CTK_LOG})"
    for call in generated:
        output = call["args"][2][len("--output=") :]
        assert call["args"][2:] == [f"--output={output}"], call
        assert re.fullmatch(r"/tmp/gpuops-cdi\.[^/]+/nvidia\.yaml", output), call
        assert not host.file(output.rsplit("/", 1)[0]).exists, f"scratch directory left: {call}"
    spec_file = host.file(SPEC)
    assert spec_file.exists
    assert spec_file.mode == MODE
    assert spec_file.user == "root"
    assert spec_file.group == "root"
    assert host.check_output(f"sha256sum {SPEC}").split()[0] == generated[-1]["sha256"]


def test_standin_contract_nvidia_ctk_writes_a_valid_cdi_spec_of_the_fixture(host):
    """The STAND-IN's contract, not the role's: the spec nvidia-ctk (stand-in) wrote from its labelled fixture is
    valid CDI with NVIDIA's device names. It checks that the stand-in is shaped like the real program."""
    text = host.file(SPEC).content_string
    assert "TEST STAND-IN" in text, "the spec comes from the labelled stand-in nvidia-ctk"
    spec = yaml.safe_load(text)
    jsonschema.validate(spec, CDI_SCHEMA)
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", FIXTURE_UUIDS[0], "1", FIXTURE_UUIDS[1], "all"]
    every = [n["path"] for n in spec["devices"][-1]["containerEdits"]["deviceNodes"]]
    assert every == ["/dev/nvidia0", "/dev/nvidia1"]


def test_cdi_generation_left_no_scratch_files(host):
    assert host.check_output("find /tmp -maxdepth 1 -name 'gpuops-cdi.*' | wc -l") == "0"


def test_toolkit_config_refuses_the_envvar_when_unprivileged(host):
    text = host.file(CONFIG).content_string
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in text.splitlines()
    # Set in place, as a top-level key before the first table; the package's other settings are kept.
    key = text.index("accept-nvidia-visible-devices-envvar-when-unprivileged = false")
    assert key < text.index("[nvidia-container-cli]")
    assert 'supported-driver-capabilities = "compat32,compute,display,graphics,ngx,utility,video"' in text


def _run_and_record(host, flags: str) -> dict:
    host.check_output(
        f"docker image inspect {IMAGE} >/dev/null 2>&1 || (d=$(mktemp -d) && mkdir -p $d/bin"
        f" && cp /bin/busybox $d/bin/ && tar -C $d -c . | docker import - {IMAGE})"
    )
    # Test-node limit: memlock is capped at the node's own hard limit (see test_20_toolkit.py).
    hard = host.check_output("awk '/Max locked memory/ {print $5}' /proc/1/limits")
    cidfile = host.check_output("mktemp -u /tmp/gpuops-envvar.XXXXXX")
    out = host.check_output(
        f"docker run --rm --cidfile {cidfile} --network none --ulimit memlock={hard}:{hard} {flags}"
        f" -e NVIDIA_VISIBLE_DEVICES=all {IMAGE} /bin/busybox echo ran"
    )
    assert out == "ran"
    cid = host.check_output(f"cat {cidfile} && rm -f {cidfile}")
    records = [json.loads(line) for line in host.file(STANDIN_LOG).content_string.splitlines() if line.startswith("{")]
    mine = [r for r in records if "request" in r and r["request"]["container"] == cid]
    assert mine, f"the stand-in runtime has no create record for container {cid}"
    return mine[-1]["request"]


def test_unprivileged_container_goes_to_the_runtime_that_reads_the_key_as_false(host):
    """The role's part, end to end: dockerd (real, with the role's daemon.json) hands an unprivileged container
    asking for every GPU to the nvidia runtime, and the runtime reads the role's config.toml (parsed by Python's
    real TOML parser, tomllib) with the key false at top level; placed under a [table] it would read as the
    default, true. Which devices the real runtime then grants is NVIDIA's rule, not the role's: the contract
    tests below check only that the stand-in applies it as documented."""
    request = _run_and_record(host, "")
    assert request["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert request["privileged"] is False
    assert request[KEY] is False


def test_standin_contract_runtime_ignores_the_envvar_of_an_unprivileged_container(host):
    """The STAND-IN's contract (its copy of NVIDIA's rule), not the role's: with the key false, an unprivileged
    container's NVIDIA_VISIBLE_DEVICES gets no device."""
    request = _run_and_record(host, "")
    assert request["envvar_ignored"] is True
    assert request["devices"] == []


def test_standin_contract_runtime_grants_devices_to_a_privileged_container(host):
    # Control of the contract test above: with CAP_SYS_ADMIN (what the runtime calls privileged) the same request
    # gets every GPU, so the empty list is the key at work, not a stand-in that never hands out devices.
    request = _run_and_record(host, "--cap-add SYS_ADMIN")
    assert request["privileged"] is True
    assert request["devices"] == ["all"]
