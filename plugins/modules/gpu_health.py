#!/usr/bin/python
# Copyright: gpuops.cluster contributors
# Apache License 2.0 (see galaxy.yml)
"""gpu_health: a read-only health sweep of one host's GPUs (kernel-log events, GPU state, DCGM) with verdicts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_health
short_description: Find failing NVIDIA GPUs on a host and say what NVIDIA says to do
version_added: 0.2.0
description:
  - "Reads, in one call per host and without changing anything: the kernel log since a cursor (C(journalctl -k),
    else C(dmesg), else C(/var/log/kern.log)), each GPU's state (NVML through C(pynvml), else C(nvidia-smi -q)), and
    DCGM diagnostics (C(dcgmi diag -r <level> -j)) where C(dcgmi) is installed."
  - "Kernel-log events: C(NVRM: Xid) lines in every format the drivers have printed (with or without C(PCI:), with
    or without C(pid=)/C(name=), with dmesg, syslog or journal prefixes), C(SXid) lines of C(nvidia-nvswitch*),
    and C(fallen off the bus) messages (also the multi-line form). A line is at most one event; an Xid 79 line is
    an C(xid) event only. Other NVRM lines are not events. An SXid's C(Severity ...) and C(Data {...}) lines
    belong to its header line when that header (same NVSwitch, same code) came before them in the text read;
    without it (a rotated or filtered log) such a line is an event of its own."
  - "Each Xid gets NVIDIA's immediate action, the \"Resolution Bucket (Immediate Action)\" column of NVIDIA's Xid
    catalog, spelt as there (C(RESTART_APP), C(RESET_GPU), C(RESTART_BM), C(IGNORE), C(CONTACT_SUPPORT),
    C(WORKFLOW_XID_48), ...), from the collection's own copy of that table; C(UNKNOWN) for a code the catalog
    does not list or gives no action for (Xid 162-172)."
  - "SXid actions come from NVIDIA NVSentinel's SXid mapping, which is NVSentinel's own and B(not) NVIDIA's
    published guidance (that is in the Fabric Manager User Guide); RV(events[].action_source) says which table
    answered."
  - "Verdict per GPU and per host: C(healthy), C(degraded) or C(failed), from findings that each name their
    evidence and action. Bucket to severity: C(IGNORE) gives no finding; C(RESTART_APP), C(CHECK_UVM) and
    C(UNKNOWN) are degraded; C(RESET_GPU), C(RESTART_BM), C(RESTART_VM), C(CONTACT_SUPPORT), C(CHECK_MECHANICALS),
    C(UPDATE_SWFW) and C(WORKFLOW_NVLINK_ERR) are failed. NVIDIA's workflows are followed: Xid 45 is ignored
    next to another Xid on the same GPU and degraded (step C(RESTART_FM)) alone; Xid 48 is failed with step
    C(DRAIN_AND_RESET) next to Xid 63/64, else C(RESET_GPU); Xid 144-150 are failed when the line says Fatal,
    degraded when Nonfatal; Xid 154 follows the recovery action it prints (C(None) none, C(Drain P2P) degraded,
    C(Drain and Reset), C(GPU Reset Required), C(Node Reboot Required) failed)."
  - "State checks: C(ecc_dbe) (volatile uncorrectable ECC > 0, failed), C(row_remap_failure) (failed),
    C(row_remap_pending) and C(retired_pages_pending) (degraded, C(RESET_GPU)), C(throttle_thermal),
    C(throttle_power) (HW power brake), C(throttle_hw_slowdown), C(nvlink_errors), C(nvlink_down), C(pcie_degraded)
    (narrower link, or slower generation while not idle) and C(persistence_off) (degraded), C(gpu_missing) (fewer
    GPUs than O(expected_gpus), failed), C(dcgm_diag) (a FAIL is failed, a WARN degraded). A software power cap is
    normal at full load and only reported in the state. NVLink links down count only on a GPU with another link up
    or in an NVSwitch fabric (a PCIe card without a bridge reports all its links down)."
  - "Collection action names, where NVIDIA has no bucket: C(INVESTIGATE) (report; nothing to do automatically)."
author:
  - gpuops.cluster maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.cluster.read_only
options:
  kernel_log_text:
    description:
      - Read this text as the kernel log instead of the host's (replay, tests, injected lines). The cursor returned
        is then C(text:<lines>).
    type: str
  since_cursor:
    description:
      - Only events after this cursor, as RV(cursor) returned it last time, so that a re-run reads only what is
        new. C(journal:<journald cursor>), C(dmesg:<boot id>:<seconds>), C(file:<inode>:<offset>) or
        C(text:<lines>); a cursor of another source, or of an earlier boot, reads the whole current boot.
      - Omitted, the whole current boot's log is read.
    type: str
  expected_gpus:
    description:
      - GPUs the plan expects on this host (C(gpuops_plan_host.gpu_count)); fewer listed by the driver is a
        C(gpu_missing) finding naming the GPUs on the PCI bus the driver does not list. 0 or more.
    type: int
  dcgm_level:
    description:
      - "Run C(dcgmi diag -r <level> -j) when C(dcgmi) (package C(datacenter-gpu-manager)) is installed: 1 is the
        quick deployment checks (seconds), 2 medium (about two minutes), 3 long (about 15 minutes), as NVIDIA's
        dcgmi diag reference puts them. 0 runs no diagnostics."
      - The default is the level of playbooks/health.yml's sweeps where C(health_dcgm_level) is unset.
      - The module does not start C(nv-hostengine); without it RV(dcgm.ran) is false and RV(dcgm.reason) says why.
    type: int
    choices: [0, 1, 2, 3]
    default: 1
  backend:
    description:
      - Which backend reads the GPU state, as M(gpuops.cluster.gpu_facts). C(auto) tries C(nvml), then
        C(nvidia-smi); when neither answers, RV(read_ok) is false. A named backend that cannot answer fails the task.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  state_text:
    description:
      - C(nvidia-smi -q) text to read instead of asking the host (tests, stand-ins). NVLink fields are then null
        (C(-q) does not show them).
    type: str
notes:
  - Read-only. A host whose state cannot be read (RV(read_ok) false) must not be acted on; the verdict then only
    reflects the kernel log and DCGM.
  - "Sources: NVIDIA's Xid catalog (https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, workbook
    of 2025-09-30, 172 codes), checked row by row by the unit tests; NVSentinel's SXid mapping
    (NVIDIA/NVSentinel@6f8b0fcf, Apache-2.0). C(scripts/gen-xid-table) rewrites both tables from newer copies."
requirements:
  - "Optional on the target, for the NVML backend: nvidia-ml-py (C(import pynvml))."
  - "Optional: C(dcgmi) (datacenter-gpu-manager) and a running C(nv-hostengine), for DCGM diagnostics."
seealso:
  - module: gpuops.cluster.gpu_facts
  - name: NVIDIA Xid catalog
    description: The immediate action (resolution bucket) of every Xid.
    link: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
"""

EXAMPLES = r"""
- name: Sweep this host's GPUs (quick DCGM check where dcgmi is installed)
  gpuops.cluster.gpu_health:
    expected_gpus: "{{ gpuops_plan_host.gpu_count }}"
  register: health

- name: Next sweep reads only what the kernel logged since
  gpuops.cluster.gpu_health:
    since_cursor: "{{ health.cursor }}"
    dcgm_level: 0

- name: Replay a kernel log and a captured nvidia-smi -q (no GPU needed)
  gpuops.cluster.gpu_health:
    kernel_log_text: "{{ lookup('ansible.builtin.file', 'kern.log') }}"
    state_text: "{{ lookup('ansible.builtin.file', 'nvidia-smi-q.txt') }}"
    dcgm_level: 0
"""

RETURN = r"""
events:
  description: Kernel-log events since the cursor, in log order.
  returned: always
  type: list
  elements: dict
  sample:
    - kind: xid
      code: 79
      pci: "0000:3b:00"
      gpu: 2
      immediate_action: RESTART_BM
      line: "NVRM: Xid (PCI:0000:3b:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus."
      time: "2024-11-14T07:00:14+0000"
      mnemonic: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
      action_source: nvidia-xid-catalog
      fatal: null
      recovery_action: null
  contains:
    kind:
      description: C(xid), C(sxid) or C(fallen_off_bus).
      type: str
    code:
      description: The Xid or SXid number; 79 for C(fallen_off_bus).
      type: int
    pci:
      description: The PCI address as printed (without C(PCI:)); null when the line names none.
      type: str
    gpu:
      description: Index of the GPU at that address; null when it maps to none (or for an SXid, an NVSwitch).
      type: int
    immediate_action:
      description: NVIDIA's bucket from the Xid catalog (NVSentinel's action for an SXid), or C(UNKNOWN).
      type: str
    line:
      description: The log line.
      type: str
    time:
      description: The time stamp as printed (dmesg seconds, syslog or ISO time); null when the line has none.
      type: str
    mnemonic:
      description: The catalog's name for the code; null when it lists none.
      type: str
    action_source:
      description: C(nvidia-xid-catalog) or C(nvsentinel-sxid-mapping); null for C(UNKNOWN).
      type: str
    fatal:
      description: For an SXid and Xid 144-150, whether the line says Fatal; else null (also for an SXid
        C(Severity)/C(Data) line read without its header).
      type: bool
    recovery_action:
      description: For Xid 154, the recovery action it changed to (C(Node Reboot Required), ...); else null.
      type: str
cursor:
  description: Pass back as O(since_cursor) next time.
  returned: always
  type: str
  sample: "journal:s=8c1d...;i=4b2;b=5f3e...;m=1a2b3c;t=61f0...;x=9d8e..."
log_source:
  description: Where the events were read, C(journalctl), C(dmesg), C(kern.log), C(text) or C(none).
  returned: always
  type: str
  sample: journalctl
log_read_ok:
  description: False when no kernel log could be read (then RV(events) is empty for want of a log, not of events).
  returned: always
  type: bool
  sample: true
gpus:
  description: >-
    One entry per GPU the state backend lists: C(index), C(pci), C(uuid), C(name), C(verdict), C(findings),
    C(state) (null where not known), C(not_supported) (the state keys the GPU does not have: NVML answers
    NotSupported or FunctionNotFound, nvidia-smi prints N/A; page retirement on A100 and newer, where row remapping
    replaces it; ECC counters with ECC off; NVLink keys of a GPU without links) and C(unread) (the error counters
    C(ecc_uncorrectable_volatile), C(ecc_uncorrectable_aggregate), C(row_remap_pending), C(row_remap_failure),
    C(retired_pages_pending) that are null for another reason: an NVML error, a value missing or garbled).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      pci: "00000000:18:00.0"
      uuid: GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1
      name: NVIDIA H100 80GB HBM3
      verdict: healthy
      findings: []
      state:
        ecc_uncorrectable_volatile: 0
        ecc_uncorrectable_aggregate: 0
        row_remap_pending: false
        row_remap_failure: false
        retired_pages_pending: null
        gpu_idle: true
        throttle_thermal: false
        throttle_power: false
        throttle_sw_power_cap: false
        throttle_hw_slowdown: false
        nvlink_crc_errors: 0
        nvlink_replay_errors: 0
        nvlink_recovery_errors: 0
        nvlink_links_active: [0, 1, 2, 3]
        nvlink_links_down: []
        pcie_gen_current: 5
        pcie_gen_max: 5
        pcie_width_current: 16
        pcie_width_max: 16
        persistence_mode: true
      not_supported: [retired_pages_pending]
      unread: []
findings:
  description: Every finding, of all GPUs and of the host (C(gpu) null).
  returned: always
  type: list
  elements: dict
  sample:
    - gpu: 2
      check: xid
      severity: failed
      evidence: "Xid 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS on PCI 0000:3b:00 (GPU 2): NVRM: Xid ..."
      action: RESTART_BM
      step: RESTART_BM
  contains:
    gpu:
      description: GPU index; null for a host-level finding.
      type: int
    check:
      description: >-
        C(xid), C(sxid), C(fallen_off_bus), C(ecc_dbe), C(row_remap_failure), C(row_remap_pending),
        C(retired_pages_pending), C(throttle_thermal), C(throttle_hw_slowdown), C(throttle_power),
        C(nvlink_errors), C(nvlink_down), C(pcie_degraded), C(persistence_off), C(gpu_missing) or C(dcgm_diag).
      type: str
    severity:
      description: C(degraded) or C(failed).
      type: str
    evidence:
      description: What was seen (the log line, the counter, the DCGM test).
      type: str
    action:
      description: NVIDIA's bucket, NVSentinel's SXid action, or the collection's C(INVESTIGATE).
      type: str
    step:
      description: The concrete step where the bucket is a workflow or Xid 154 (C(RESET_GPU), C(DRAIN_AND_RESET),
        C(RESTART_FM), C(RESTART_BM), ...); the bucket itself for a plain bucket; null otherwise.
      type: str
verdict:
  description: The host's verdict, the worst of its GPUs and host-level findings.
  returned: always
  type: str
  sample: failed
state_source:
  description: C(nvml), C(nvidia-smi) or C(none).
  returned: always
  type: str
  sample: nvml
read_ok:
  description: >-
    False when the GPU state could not be read, or a GPU's error counters were left unread (the C(unread) list of
    an RV(gpus) entry); a counter the GPU does not support (its C(not_supported) list) does not count. The host
    must then not be acted on.
  returned: always
  type: bool
  sample: true
dcgm:
  description: The DCGM diagnostics, when they ran.
  returned: always
  type: complex
  sample: {ran: false, level: 1, version: null, results: [], reason: "dcgmi is not installed ..."}
  contains:
    ran:
      description: True when C(dcgmi diag -r <level> -j) printed its JSON.
      type: bool
    level:
      description: The O(dcgm_level) asked for.
      type: int
    version:
      description: DCGM's version from the JSON; null when it did not run.
      type: str
    results:
      description: One entry per test result, C({category, test, gpus, status, warnings, info}); C(status) is
        C(pass), C(fail), C(warn) or C(skip); C(gpus) the GPU indexes the result is about.
      type: list
      elements: dict
    reason:
      description: Why it did not run, or how C(dcgmi) exited.
      type: str
notes:
  description: Why a source or backend was skipped, and other observations that are not failures.
  returned: always
  type: list
  elements: str
  sample: ["log: journalctl is not in PATH"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_facts_common import GpuFactsError
from ansible_collections.gpuops.cluster.plugins.module_utils.gpu_health import sweep

ARGUMENT_SPEC = {
    "kernel_log_text": {"type": "str"},
    "since_cursor": {"type": "str"},
    "expected_gpus": {"type": "int"},
    "dcgm_level": {"type": "int", "default": 1, "choices": [0, 1, 2, 3]},
    "backend": {"type": "str", "default": "auto", "choices": ["auto", "nvml", "nvidia-smi"]},
    "state_text": {"type": "str"},
}


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.run_command_environ_update = {"LC_ALL": "C"}
    try:
        result = sweep(module.run_command, module.get_bin_path, **module.params)  # the options are sweep's keywords
    except GpuFactsError as err:
        module.fail_json(msg=str(err))
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
