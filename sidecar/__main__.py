"""``python -m sidecar --config configs/finney.yaml [--host H] [--port P] [--data-dir D]``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from pathlib import Path

from aiohttp import web

from common.config import ConfigError, load_config
from sidecar.server.app import create_app
from sidecar.server.reload import on_sighup


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sidecar", description=__doc__)
    ap.add_argument("--config", required=True, help="deployment YAML, e.g. configs/finney.yaml")
    ap.add_argument("--host", help="listen address (overrides sidecar.host)")
    ap.add_argument("--port", type=int, help="listen port (overrides sidecar.port)")
    ap.add_argument("--data-dir", help="state directory (overrides data_dir)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_config(args.config)
    except ConfigError as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    sidecar = config.sidecar
    if args.host:
        sidecar = dataclasses.replace(sidecar, host=args.host)
    if args.port is not None:
        sidecar = dataclasses.replace(sidecar, port=args.port)
    config = dataclasses.replace(config, sidecar=sidecar)
    if args.data_dir:
        config = dataclasses.replace(config, data_dir=Path(args.data_dir))
    try:
        config.data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(
            f"sidecar: config error: data_dir: cannot create {config.data_dir}: {e.strerror}",
            file=sys.stderr,
        )
        return 2
    url = f"http://{sidecar.host}:{sidecar.port}"
    app = create_app(config)
    app.cleanup_ctx.append(on_sighup(args.config))  # SIGHUP: the registry again, in place
    try:
        web.run_app(
            app,
            host=sidecar.host,
            port=sidecar.port,
            # Printed once the socket is bound, so the line can be waited for.
            print=lambda _msg: print(f"sidecar listening on {url}", flush=True),
            handle_signals=True,
            access_log=None,
        )
    except OSError as e:
        print(
            f"sidecar: cannot listen on {sidecar.host}:{sidecar.port}: {e.strerror}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
