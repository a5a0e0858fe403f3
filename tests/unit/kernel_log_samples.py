"""Real kernel-log lines about NVIDIA GPUs, each beside where it was published, for the gpu_health tests.

Every line is copied as its author posted it (GitHub issues and pull requests, NVIDIA's documentation and forum);
none was written for these tests. ``Sample(line, kind, code, pci, action, source)``: the event gpu_health must
return for the line (kind, code, PCI address as printed, NVIDIA's bucket), or ``kind=None`` for a line that is
not an event. A multi-line message is one sample whose ``line`` holds its lines.

* ``DEVELOPMENT``: the lines the parser was written against.
* ``HELD_OUT``: lines collected after the parser was written and not used to write it (tests/unit/plugins/modules/
  test_gpu_health.py runs them through the module); what they showed is in the commit that added them.
"""

from __future__ import annotations

from typing import NamedTuple


class Sample(NamedTuple):
    line: str
    kind: str | None
    code: int | None
    pci: str | None
    action: str | None
    source: str


NVSENTINEL_155 = "https://github.com/NVIDIA/NVSentinel/issues/155"
GPUD_46 = "https://github.com/leptonai/gpud/pull/46"
OGKM_1150 = "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150"
NVTRUST_124 = "https://github.com/NVIDIA/nvtrust/issues/124"
GPUD_338 = "https://github.com/leptonai/gpud/pull/338"
XID_DOCS = "https://docs.nvidia.com/deploy/xid-errors/index.html (section 'Viewing Xid Error Messages')"
GPUD_1174 = "https://github.com/leptonai/gpud/pull/1174"
GPUD_1160 = "https://github.com/leptonai/gpud/pull/1160"
GPUD_KMSG = (
    "https://github.com/leptonai/gpud/blob/197e30a6ae452690f09461c75918527af2885035/pkg/nvidia-query/xid/kmsg_test.go"
)
FORUM_62 = (
    "https://forums.developer.nvidia.com/t/bug-xid-62-gsp-watchdog-timeout-on-rtx-5080-during-high-context-llm-"
    "inference/371272"
)
POPOS_3363 = "https://github.com/pop-os/pop/issues/3363"

DEVELOPMENT = [
    # dmesg, the multi-line "fallen off the bus" message without an Xid (open kernel module 570.158.01)
    Sample(
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
        "               NVRM: fallen off the bus and is not responding to commands.",
        "fallen_off_bus",
        79,
        "0000:b3:00.0",
        "RESTART_BM",
        NVSENTINEL_155,
    ),
    Sample(
        "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).", None, None, None, None, NVSENTINEL_155
    ),
    Sample(
        "[ 1843.439669] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release Build  "
        "(dvs-builder@U22-I3-B10-02-5)  Mon Jun  2 13:13:04 UTC 2025",
        None,
        None,
        None,
        None,
        NVSENTINEL_155,
    ),
    Sample(
        "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
        "xid",
        79,
        "0000:44:00",
        "RESTART_BM",
        NVSENTINEL_155,
    ),
    # dmesg --ctime: pid='<unknown>' and pid=/name= forms
    Sample(
        "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM "
        "Warp Exception on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter",
        "xid",
        13,
        "0000:cb:00",
        "RESTART_APP",
        GPUD_46,
    ),
    Sample(
        "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, "
        "errorString CTX SWITCH TIMEOUT, Info 0x58005",
        "xid",
        109,
        "0000:cb:00",
        "RESET_GPU",
        GPUD_46,
    ),
    Sample(
        "[Fri Aug 30 11:11:22 2024] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
        "skipping further processing",
        None,
        None,
        None,
        None,
        GPUD_46,
    ),
    # journalctl -k, prefix kept from "kernel:" on
    Sample(
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
        "xid",
        45,
        "0000:dc:00",
        "WORKFLOW_XID_45",
        OGKM_1150,
    ),
    # NVSwitch: one SXid event is a Non-fatal/Fatal line; its Severity and Data lines belong to it when it came
    # before them (test_gpu_health_events.py reads them in that order). Each line here is read alone, so the
    # Severity and Data lines have no header before them and are events of their own (issue 36: a log rotated or
    # filtered between them must not hide the SXid).
    Sample(
        "[   38.178720] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Non-fatal, Link 44 Minion Link DLREQ "
        "interrupt",
        "sxid",
        22013,
        "0000:04:00.0",
        "IGNORE",
        NVTRUST_124,
    ),
    Sample(
        "[   38.180708] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Severity 0 Engine instance 44 Sub-engine "
        "instance 00",
        "sxid",
        22013,
        "0000:04:00.0",
        "IGNORE",
        NVTRUST_124,
    ),
    Sample(
        "[   38.175561] nvidia-nvswitch3: SXid (PCI:0000:04:00.0): 22013, Data {0x0000002b, 0x0000002b, 0x00000000, "
        "0x0000002b, 0x80005302, 0x00000000, 0x00000000, 0x00000000, 0x00000000}",
        "sxid",
        22013,
        "0000:04:00.0",
        "IGNORE",
        NVTRUST_124,
    ),
    Sample(
        "[   38.174242] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.195.03  Release Build  "
        "(dvs-builder@U22-I3-H04-03-1)  Sat Sep 20 00:47:16 UTC 2025",
        None,
        None,
        None,
        None,
        NVTRUST_124,
    ),
    # dmesg --decode --time-format iso: an SXid Data line (alone here: an event of its own)
    Sample(
        "kern  :err   : 2025-01-25T10:34:54,859532+00:00 nvidia-nvswitch1: SXid (PCI:0000:84:00.0): 12028, Data "
        "{0x000001c0, 0x00bd5c8a, 0x00000500, 0x00000064, 0x00000000, 0x40008000, 0x5a001100, 0x00000000, "
        "0x00000000}",
        "sxid",
        12028,
        "0000:84:00.0",
        "RESET_FABRIC",
        GPUD_338,
    ),
    # NVIDIA's own example: an Xid without "PCI:", and the GPU header line that is not an event
    Sample("[…] NVRM: GPU at 0000:03:00: GPU-b850f46d-d5ea-c752-ddf3-c4453e44d3f7", None, None, None, None, XID_DOCS),
    Sample("[…] NVRM: Xid (0000:03:00): 14, Channel 00000001", "xid", 14, "0000:03:00", "IGNORE", XID_DOCS),
    # NVLink5 Xids (GB200)
    Sample(
        "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 "
        "0x00000000 0x00000000)",
        "xid",
        149,
        "0019:01:00",
        "WORKFLOW_NVLINK5_ERR",
        GPUD_1174,
    ),
    Sample(
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 "
        "0x00000000 0x00100000 0x00000004)",
        "xid",
        145,
        "0018:01:00",
        "WORKFLOW_NVLINK5_ERR",
        GPUD_1174,
    ),
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 "
        "0x00000000 0x00000000 0x00000000)",
        "xid",
        144,
        "0000:01:00",
        "WORKFLOW_NVLINK5_ERR",
        GPUD_1160,
    ),
    Sample(
        "[171167.621162] NVRM: Xid (PCI:0009:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x4 "
        "(Drain and Reset)",
        "xid",
        154,
        "0009:01:00",
        "XID_154",
        GPUD_KMSG,
    ),
    Sample(
        "[111111111.111] NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        "xid",
        79,
        "0000:05:00",
        "RESTART_BM",
        GPUD_KMSG,
    ),
    Sample("NVRM: Xid error: xyz, invalid data", None, None, None, None, GPUD_KMSG),
    # GSP watchdog (RTX 5080, 595.71.05): Xid 62, a GSP line that is not an event, and Xid 154
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 62, 323f0f30 0000c3d8 00000000 206dae68 206da022 206da190 206d85f6 206d8d86",
        "xid",
        62,
        "0000:01:00",
        "RESET_GPU",
        FORUM_62,
    ),
    Sample(
        "NVRM: GPU0 _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has halted.",
        None,
        None,
        None,
        None,
        FORUM_62,
    ),
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
        "xid",
        154,
        "0000:01:00",
        "XID_154",
        FORUM_62,
    ),
    # journalctl with host name: NVRM lines of a GSP dump, not events
    Sample(
        "Sep 28 23:34:26 oryx.wonder.boy kernel: NVRM:     -4    4099 POST_EVENT            0x0000000000000021 "
        "0x0000000000000008 0x00062338ed1153f6 0x00062338ed115414     30us  ",
        None,
        None,
        None,
        None,
        POPOS_3363,
    ),
]

CHIA_301 = "https://github.com/madMAx43v3r/chia-gigahorse/issues/301"
DXVK_1027 = "https://github.com/doitsujin/dxvk/issues/1027"
OGKM_363 = "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/363"
BUMBLEBEE_677 = "https://github.com/Bumblebee-Project/Bumblebee/issues/677"
OGKM_1151 = "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151"
OGKM_1170 = "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1170"
LLAMA_JOURNAL = "a public GitHub file holding a llama-swap journal (search index file id 17367881429; URL not shown)"

HELD_OUT = [
    Sample(
        "[14328.198496] NVRM: GPU at PCI:0000:0a:00: GPU-760d0170-b7c5-6817-9414-6cc7112645de",
        None,
        None,
        None,
        None,
        CHIA_301,
    ),
    Sample(
        "[14328.198504] NVRM: Xid (PCI:0000:0a:00): 31, pid=13332, name=cuda_plot_k32_v, Ch 00000010, intr 00000000. "
        "MMU Fault: ENGINE CE2 HUBCLIENT_CE0 faulted @ 0x7f29_5b8c9000. Fault is of type FAULT_PRIV_VIOLATION "
        "ACCESS_TYPE_VIRT_READ",
        "xid",
        31,
        "0000:0a:00",
        "RESTART_APP",
        CHIA_301,
    ),
    Sample(
        "[14370.687545] NVRM: Xid (PCI:0000:0a:00): 62, pid='<unknown>', name=<unknown>, 2023b230 20238a3a 2023e8b6 "
        "2023eac4 2023ec3c 2023ea86 00000000 00000000",
        "xid",
        62,
        "0000:0a:00",
        "RESET_GPU",
        CHIA_301,
    ),
    Sample(
        "[14370.688139] NVRM: Xid (PCI:0000:0a:00): 45, pid='<unknown>', name=<unknown>, Ch 00000008",
        "xid",
        45,
        "0000:0a:00",
        "WORKFLOW_XID_45",
        CHIA_301,
    ),
    Sample("[14372.273528] sched: RT throttling activated", None, None, None, None, CHIA_301),
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 31, Ch 0000005a, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_1 "
        "faulted @ 0x0_00000000. Fault is of type FAULT_PDE ACCESS_TYPE_READ",
        "xid",
        31,
        "0000:01:00",
        "RESTART_APP",
        DXVK_1027,
    ),
    Sample(
        "[31609.615230] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: Class 0x0 Subchannel 0x0 Mismatch",
        "xid",
        13,
        "0000:01:00",
        "RESTART_APP",
        DXVK_1027,
    ),
    Sample(
        "[31609.615516] NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000052 intr 02000000",
        "xid",
        32,
        "0000:01:00",
        "RESTART_APP",
        DXVK_1027,
    ),
    Sample(
        "NVRM: Xid (PCI:0000:08:00): 31, pid=169800, name=chrome, Ch 00000023, intr 00000000. MMU Fault: ENGINE CE0 "
        "HUBCLIENT_HSCE0 faulted @ 0x0_0abe0000. Fault is of type FAULT_PTE ACCESS_TYPE_VIRT_READ",
        "xid",
        31,
        "0000:08:00",
        "RESTART_APP",
        OGKM_363,
    ),
    Sample("NVRM: GPU at PCI:0000:08:00: GPU-UID", None, None, None, None, OGKM_363),
    Sample(
        "[24128.834365] NVRM: Xid (PCI:0000:01:00): 31, Ch 00000003, engmask 00000101, intr 10000000",
        "xid",
        31,
        "0000:01:00",
        "RESTART_APP",
        BUMBLEBEE_677,
    ),
    Sample("NVRM: GPU Board Serial Number: 0", None, None, None, None, OGKM_1151),
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.", "xid", 79, "0000:01:00", "RESTART_BM", OGKM_1151
    ),
    Sample(
        "NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
        "fallen_off_bus",
        79,
        "0000:01:00.0",
        "RESTART_BM",
        OGKM_1151,
    ),
    Sample(
        "NVRM: krcRcAndNotifyAllChannels_IMPL: RC all channels for critical error 79.",
        None,
        None,
        None,
        None,
        OGKM_1151,
    ),
    Sample(
        "NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (PF FLR)",
        "xid",
        154,
        "0000:01:00",
        "XID_154",
        OGKM_1151,
    ),
    Sample(
        "May 27 16:50:10 fedora kernel: NVRM: GPU 0000:09:00.0: RmInitAdapter failed! (0x22:0x56:894)",
        None,
        None,
        None,
        None,
        OGKM_1151,
    ),
    Sample(
        "May 27 16:50:10 fedora kernel: NVRM: osInitNvMapping: *** Cannot attach gpu", None, None, None, None, OGKM_1151
    ),
    Sample(
        "[Fri May 29 13:01:31 2026] [drm:__nv_drm_nvkms_gem_obj_init [nvidia_drm]] *ERROR* [nvidia-drm] [GPU ID "
        "0x00000200] Failed to get memory pages for NvKmsKapiMemory 0x000000000878c6a2",
        None,
        None,
        None,
        None,
        OGKM_1170,
    ),
    Sample(
        "May 15 08:57:36 red kernel: NVRM: Xid (PCI:0000:01:00): 31, pid=80798, name=llama-server, Ch 00000008, intr "
        "00000000. MMU Fault: ENGINE GRAPHICS GPC1 GPCCLIENT_T1_3 faulted @ 0x7e9f_4f200000. Fault is of type "
        "FAULT_PDE ACCESS_TYPE_VIRT_READ",
        "xid",
        31,
        "0000:01:00",
        "RESTART_APP",
        LLAMA_JOURNAL,
    ),
]
