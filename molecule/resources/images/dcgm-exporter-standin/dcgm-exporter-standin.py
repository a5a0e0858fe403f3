#!/usr/bin/env python3
"""TEST STAND-IN for NVIDIA dcgm-exporter (the real one needs a GPU and NVIDIA's registry).

Serves /metrics in Prometheus text format with exactly the fields listed in the counters CSV
given with -f (the same file the real exporter gets), for STANDIN_GPUS fake GPUs, with the
label set dcgm-exporter attaches (gpu, UUID, pci_bus_id, device, modelName, Hostname,
DCGM_FI_DRIVER_VERSION). Values are fixed defaults until a test sets one:

    curl -X POST -d '{"metric": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "value": 90}' http://127.0.0.1:9400/set

/set is accepted only when STANDIN_ALLOW_SET=1. Nothing here measures a GPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULTS = {
    "DCGM_FI_DEV_GPU_TEMP": 45, "DCGM_FI_DEV_MEMORY_TEMP": 50, "DCGM_FI_DEV_GPU_UTIL": 30,
    "DCGM_FI_DEV_FB_USED": 1000, "DCGM_FI_DEV_FB_FREE": 79000, "DCGM_FI_DEV_FB_RESERVED": 500,
    "DCGM_FI_DEV_SM_CLOCK": 1410, "DCGM_FI_DEV_MEM_CLOCK": 1593, "DCGM_FI_DEV_POWER_USAGE": 80.5,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.7, "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.4,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 4e9, "DCGM_FI_PROF_PCIE_RX_BYTES": 4e9, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 1000,
}


def read_counters(path: str) -> list[tuple[str, str, str]]:
    fields = []
    with open(path, encoding="utf-8") as handle:
        for row in csv.reader(line for line in handle if line.strip() and not line.lstrip().startswith("#")):
            name, kind, help_text = [*row, "", ""][:3]
            fields.append((name.strip(), kind.strip(), help_text.strip()))
    return fields


class State:
    def __init__(self, fields: list[tuple[str, str, str]], gpus: int) -> None:
        self.lock = threading.Lock()
        self.fields = fields
        self.gpus = [str(i) for i in range(gpus)]
        self.values = {(f, g): DEFAULTS.get(f, 0) for f, kind, _ in fields if kind != "label" for g in self.gpus}

    def render(self) -> str:
        host = socket.gethostname()
        driver = next((f for f, kind, _ in self.fields if kind == "label"), None)
        out = []
        with self.lock:
            for name, kind, help_text in self.fields:
                if kind == "label":
                    continue
                out.append(f"# HELP {name} {help_text} (TEST STAND-IN)")
                out.append(f"# TYPE {name} {kind}")
                for gpu in self.gpus:
                    labels = (f'gpu="{gpu}",UUID="GPU-00000000-0000-0000-0000-00000000000{gpu}",'
                              f'pci_bus_id="00000000:0{gpu}:00.0",device="nvidia{gpu}",'
                              f'modelName="TEST STAND-IN",Hostname="{host}"')
                    if driver:
                        labels += f',{driver}="0.0.0-standin"'
                    out.append(f"{name}{{{labels}}} {self.values[(name, gpu)]}")
        return "\n".join(out) + "\n"


def handler_for(state: State, allow_set: bool):
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: str, ctype: str = "text/plain; version=0.0.4") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.split("?")[0] == "/metrics":
                self._send(200, state.render())
            elif self.path == "/health":
                self._send(200, "ok\n")
            else:
                self._send(404, "not found\n")

        def do_POST(self) -> None:
            if self.path != "/set" or not allow_set:
                self._send(403, "setting values is disabled (STANDIN_ALLOW_SET!=1)\n")
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                key = (body["metric"], str(body["gpu"]))
                if key not in state.values:
                    raise KeyError(f"unknown metric/gpu {key}")
                with state.lock:
                    state.values[key] = float(body["value"])
            except (KeyError, ValueError, TypeError) as exc:
                self._send(400, f"{exc}\n")
                return
            self._send(200, "ok\n")

        def log_message(self, fmt: str, *args: object) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-f", "--collectors", required=True)
    parser.add_argument("-a", "--address", default=":9400")
    args, _ = parser.parse_known_args()
    host, _, port = args.address.rpartition(":")
    state = State(read_counters(args.collectors), int(os.environ.get("STANDIN_GPUS", "4")))
    allow_set = os.environ.get("STANDIN_ALLOW_SET") == "1"
    # Listens on every interface of its own container network namespace, like the real exporter;
    # the compose file publishes it on the loopback address only.
    server = ThreadingHTTPServer((host or "0.0.0.0", int(port)), handler_for(state, allow_set))
    # Stops on `docker stop`'s SIGTERM, as the real exporter does (as PID 1 without a handler it was ignored: each
    # stop waited the 10 s grace period).
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    main()
