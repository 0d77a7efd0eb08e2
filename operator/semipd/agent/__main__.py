"""`semipd-agent [agent options] -- <engine command...>`: parse options, serve the admin API, supervise.

Exit status: the engine's (128+N if it died of signal N); 2 for usage errors; 1 if startup failed.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from semipd.agent import lifecycle
from semipd.agent.admin import AdminServer
from semipd.agent.auth import TokenError, TokenFile
from semipd.agent.drivers import DRIVERS, HealthEndpoint
from semipd.agent.split import Split, SplitBounds
from semipd.agent.supervision import Settings
from semipd.agent.supervisor import Supervisor

log = logging.getLogger("semipd.agent")


class UsageError(Exception):
    pass


def check_bind_address(host: str, pod_ip: str | None) -> str:
    """`host` if it is safe to bind: a literal loopback address, or the pod's own IP.

    Parsed with `ipaddress`, not compared as text: `0`, `::0` and `000.000.000.000` all mean "every
    interface" to the socket layer, and a hostname may resolve to anything."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(f"refusing to bind the admin API to {host!r}: not a literal IP address") from None
    if address.is_unspecified or address.is_multicast:
        raise UsageError(f"refusing to bind the admin API to wildcard address {host!r}; give the pod IP")
    if address.is_loopback:
        return host
    try:
        own = ipaddress.ip_address(pod_ip) if pod_ip else None
    except ValueError:
        own = None
    if own is None or own != address:
        raise UsageError(f"refusing to bind the admin API to {host!r}: neither loopback nor the pod IP ($POD_IP)")
    return host


class _Parser(argparse.ArgumentParser):
    """Usage errors on one line, exit 2, as every `semipd` command (standard library only)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser(prog: str = "semipd-agent") -> argparse.ArgumentParser:
    p = _Parser(
        prog=prog,
        usage=f"{prog} [options] -- <engine command...>",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="In-pod agent: supervises a semi-PD engine and serves the split admin API.",
    )
    p.add_argument("--driver", required=True, choices=sorted(DRIVERS), help="engine kind (launch and switch mode)")
    p.add_argument("--admin-host", default=None, help="address to bind (default: $POD_IP, else 127.0.0.1)")
    p.add_argument("--admin-port", type=int, default=9090, help="port of the admin API")
    p.add_argument("--token-file", default="/var/run/semipd/token", help="file holding the admin bearer token")
    p.add_argument("--run-dir", default="/semipd/run", help="per-pod dir for control sockets and pid file")
    p.add_argument("--prefill-percent", type=int, default=None, help="initial prefill share (driver default)")
    p.add_argument("--decode-percent", type=int, default=None, help="initial decode share (driver default)")
    for phase in ("prefill", "decode"):
        p.add_argument(f"--{phase}-min", type=int, default=1, help=f"lowest {phase} share PUT may set")
        p.add_argument(f"--{phase}-max", type=int, default=100, help=f"highest {phase} share PUT may set")
    p.add_argument("--startup-timeout", type=float, default=900.0, help="s for the engine to come up")
    p.add_argument("--switch-timeout", type=float, default=120.0, help="s for a standby worker to become ready")
    p.add_argument("--worker-drain-timeout", type=float, default=60.0, help="s for an old worker's batch to finish")
    p.add_argument("--drain-timeout", type=float, default=25.0, help="s to drain requests on SIGTERM")
    p.add_argument("--stop-timeout", type=float, default=5.0, help="s between SIGTERM and SIGKILL for children")
    p.add_argument(
        "--drain-delay",
        type=float,
        default=0.0,
        help="on SIGTERM: s to keep admitting requests (readiness already off) before draining",
    )
    p.add_argument(
        "--restart-drain-seconds",
        type=float,
        default=5.0,
        help="restart mode: s with readiness off before the engine is relaunched",
    )
    p.add_argument(
        "--restart-drain-timeout",
        type=float,
        default=300.0,
        help="restart mode: longest s to wait for in-flight requests to finish before the relaunch",
    )
    p.add_argument("--restart-timeout", type=float, default=900.0, help="restart mode: s for the relaunch")
    p.add_argument("--poll-interval", type=float, default=0.02, help="s between control-socket polls")
    p.add_argument(
        "--mps",
        choices=("auto", "on", "off"),
        default="auto",
        help="run the MPS control daemon: auto = when the driver needs it and the binary exists",
    )
    p.add_argument(
        "--engine-health-url",
        default=None,
        help="engine health URL (http://host:port/path); default derived from the engine's --host/--port",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR")
    return p


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(agent options, engine command); the engine command is empty when `--` is missing."""
    if "--" not in argv:
        return list(argv), []
    i = list(argv).index("--")
    return list(argv[:i]), list(argv[i + 1 :])


def parse_health_url(url: str) -> HealthEndpoint:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise UsageError(f"--engine-health-url must be http://host:port/path, got {url!r}")
    return HealthEndpoint(parts.hostname, parts.port or 80, parts.path or "/")


def settings_from_args(ns: argparse.Namespace, engine_argv: list[str]) -> tuple[Settings, str]:
    driver = DRIVERS[ns.driver]
    pod_ip = os.environ.get("POD_IP")
    host = check_bind_address(ns.admin_host or pod_ip or "127.0.0.1", pod_ip)
    bounds = SplitBounds(ns.prefill_min, ns.prefill_max, ns.decode_min, ns.decode_max)
    problems = bounds.problems()
    initial = Split(
        driver.default_split.prefill_percent if ns.prefill_percent is None else ns.prefill_percent,
        driver.default_split.decode_percent if ns.decode_percent is None else ns.decode_percent,
    )
    if driver.supports_split:
        problems += bounds.check(initial)
    problems += driver.check_command(engine_argv, ns.run_dir)
    if problems:
        raise UsageError("; ".join(problems))
    health = parse_health_url(ns.engine_health_url) if ns.engine_health_url else driver.health_endpoint(engine_argv)
    settings = Settings(
        driver=driver,
        engine_argv=tuple(engine_argv),
        run_dir=ns.run_dir,
        initial=initial,
        bounds=bounds,
        startup_timeout=ns.startup_timeout,
        switch_timeout=ns.switch_timeout,
        worker_drain_timeout=ns.worker_drain_timeout,
        drain_timeout=ns.drain_timeout,
        drain_delay=ns.drain_delay,
        stop_timeout=ns.stop_timeout,
        restart_drain_seconds=ns.restart_drain_seconds,
        restart_drain_timeout=ns.restart_drain_timeout,
        restart_timeout=ns.restart_timeout,
        poll_interval=ns.poll_interval,
        mps=ns.mps,
        health=health,
    )
    return settings, host


async def _run(settings: Settings, host: str, port: int, tokens: TokenFile) -> int:
    supervisor = Supervisor(settings, os.environ)
    lifecycle.install_signal_handlers(supervisor)
    admin = AdminServer(supervisor, tokens, host, port)
    await admin.start()
    try:
        return await supervisor.run()
    finally:
        await admin.close()


def main(argv: list[str] | None = None, prog: str = "semipd-agent") -> int:
    """Run the agent; `prog` names it in messages (`semipd agent` when started through `semipd`)."""
    args = sys.argv[1:] if argv is None else argv
    parser = build_parser(prog)
    try:
        agent_args, engine_argv = split_argv(args)
        ns = parser.parse_args(agent_args)
        if not engine_argv:
            raise UsageError("missing `-- <engine command...>`")
        logging.basicConfig(
            level=getattr(logging, str(ns.log_level).upper(), logging.INFO),
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
        settings, host = settings_from_args(ns, engine_argv)
        tokens = TokenFile(ns.token_file)
        tokens.token()
        os.makedirs(settings.run_dir, exist_ok=True)
    except (UsageError, TokenError, ValueError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        parser.print_usage(sys.stderr)
        return 2
    except SystemExit as e:  # argparse errors and --help
        return int(e.code) if isinstance(e.code, int) else 2
    try:
        return asyncio.run(_run(settings, host, ns.admin_port, tokens))
    except OSError as e:
        log.error("agent failed: %s", e)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
