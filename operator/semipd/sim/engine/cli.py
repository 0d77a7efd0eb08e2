"""`semipd sim-engine --role decode-owner|prefill-worker ...`: entry point of the simulated engine."""

from __future__ import annotations

import asyncio
import logging
import sys

from semipd.perf import LatencyModel
from semipd.sim.engine.config import DECODE_OWNER, ConfigError, parse_config


def main(argv: list[str] | None = None, prog: str = "semipd sim-engine") -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_config(args)
        model = LatencyModel.from_names(cfg.hardware, cfg.model, cfg.tp)
    except (ConfigError, KeyError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # argparse
        return int(e.code) if isinstance(e.code, int) else 2
    logging.basicConfig(
        level=getattr(logging, cfg.log_level.upper(), logging.INFO),
        format=f"%(asctime)s %(levelname)s {cfg.role}[%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if cfg.role == DECODE_OWNER:
        from semipd.sim.engine.owner import DecodeOwner

        return asyncio.run(DecodeOwner(cfg, model).serve())
    from semipd.sim.engine.worker import run_worker

    return asyncio.run(run_worker(cfg, model))


if __name__ == "__main__":
    raise SystemExit(main())
