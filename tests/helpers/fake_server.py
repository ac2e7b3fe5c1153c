"""Run the whole app (REST + page) on the fake sine engine in its own process, for crash tests.

    python -m tests.helpers.fake_server --port 8123 --root /tmp/box [--delay 0.3]

Exits only when killed; tests/system/test_fault_recovery.py SIGKILLs it mid-job and starts it again.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    import uvicorn

    from app import build_app
    from cosyedge.config import Settings
    from cosyedge.service.facade import Service
    from tests.helpers.fake_engine import FakeFactory

    settings = Settings(root=args.root, port=args.port, idle_unload_minutes=0).validate()
    service = Service(settings, engine_factory=FakeFactory(delay=args.delay))
    service.start()
    uvicorn.run(build_app(service), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
