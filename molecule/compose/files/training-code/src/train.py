"""Scaffold entry point of the team's training image: replace with the real training code.

Reads its configuration from config/train.yaml, data from /datasets (mounted read-only at run
time, never baked into the image), and writes checkpoints to /scratch.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="config/train.yaml")
    args = parser.parse_args()
    print(f"config: {Path(args.config).read_text()!r}")
    print(f"datasets: {sorted(os.listdir('/datasets')) if os.path.isdir('/datasets') else 'not mounted'}")
    print(f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '(all the container sees)')}")


if __name__ == "__main__":
    main()
