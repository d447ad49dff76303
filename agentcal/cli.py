"""`agentcal run`: the whole service in one process tree (web, Celery worker, Celery beat).

It needs DATABASE_URL, REDIS_URL and SECRET_KEY like every process of the service, and fails naming
the missing ones; `python3 dev.py run` runs it under agentcal.embedded, which starts the embedded
PostgreSQL and Redis first and stops them after it. The children inherit the environment. Ctrl-C (or
SIGTERM) stops the children, then this process.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path


def _setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentcal.settings")
    import django

    django.setup()


def _prepare_multiprocess_metrics() -> None:
    """Several processes record metrics; they share a folder the scrape aggregates (cleared per run)."""
    from agentcal.embedded import data_dir

    folder = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or data_dir() / "prometheus")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def startup_banner(bind: str) -> str:
    """What `run` prints once its children start. It names DASHBOARD_BASE_URL, not the bound address:
    passkeys work only on that host name (a browser refuses them on an IP address such as 127.0.0.1), and
    pages asked for under another name of this server are redirected there (CanonicalHostMiddleware)."""
    from django.conf import settings

    base = settings.DASHBOARD_BASE_URL
    return f"AgentCal is up: {base}/  (Ctrl-C stops everything)\nAgent API: {base}/v1  (listening on {bind})"


def run(args: argparse.Namespace) -> int:
    _prepare_multiprocess_metrics()  # before anything imports prometheus_client
    # Links in emails and the passkey origin must match where this server listens, unless configured.
    os.environ.setdefault("DASHBOARD_BASE_URL", f"http://localhost:{args.port}")
    _setup_django()
    from django.core.management import call_command

    call_command("migrate", interactive=False, verbosity=0)
    python = sys.executable
    from agentcal.sizing import default_web_workers

    workers = str(args.workers or default_web_workers())
    bind = f"{args.host}:{args.port}"
    commands = {
        "web": [
            python,
            "-m",
            "gunicorn",
            "agentcal.wsgi:application",
            "--bind",
            bind,
            "--workers",
            workers,
            "--threads",
            str(max(1, args.threads)),
            "--access-logfile",
            "-",
            "--graceful-timeout",
            "10",
            "--config",
            "python:agentcal.gunicorn_conf",
        ],
        "worker": [
            python,
            "-m",
            "celery",
            "-A",
            "agentcal",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(args.celery_concurrency),
        ],
        "beat": [python, "-m", "celery", "-A", "agentcal", "beat", "--loglevel", "INFO"],
        # Agents' inboxes: the SMTP listener (INBOUND_SMTP_HOST / INBOUND_SMTP_PORT).
        "smtp": [python, "-m", "agentcal.cli", "manage", "inbound_smtp"],
    }
    # The MCP server over streamable HTTP, when installed (clients/mcp; a checkout's .venv has it): each
    # request acts as the agent whose key it carries, against this server. --mcp-port 0 leaves it out.
    if args.mcp_port and importlib.util.find_spec("agentcal_mcp") is not None:
        commands["mcp"] = [
            python,
            "-m",
            "agentcal_mcp",
            "--http",
            "--host",
            args.host,
            "--port",
            str(args.mcp_port),
            "--base-url",
            f"http://127.0.0.1:{args.port}",
        ]
    children: dict[str, subprocess.Popen[bytes]] = {}
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    for name, command in commands.items():
        children[name] = subprocess.Popen(command)
    print(startup_banner(bind), flush=True)
    if "mcp" in commands:
        print(f"MCP server (streamable HTTP): http://{args.host}:{args.mcp_port}/mcp", flush=True)
    exit_code = 0
    while not stopping:
        for name, child in children.items():
            if child.poll() is not None:
                print(
                    f"{name} exited with {child.returncode}; stopping the rest", file=sys.stderr, flush=True
                )
                stopping, exit_code = True, 1
                break
        time.sleep(0.5)
    for child in children.values():
        if child.poll() is None:
            child.terminate()
    deadline = time.monotonic() + 15
    for child in children.values():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
    return exit_code


# What a shell reports for a program stopped by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcal", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run web server, Celery worker and beat")
    run_parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
    run_parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    run_parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="gunicorn workers (default WEB_CONCURRENCY, else cores + 1 with PostgreSQL on this machine, "
        "2 x cores + 1 without)",
    )
    run_parser.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("WEB_THREADS", "1")),
        help="threads per gunicorn worker (default 1: sync workers, which measured best here; more: "
        "gthread, where AGENT_MAX_IN_FLIGHT_PER_PROCESS caps one agent's share of them)",
    )
    run_parser.add_argument("--celery-concurrency", type=int, default=2)
    run_parser.add_argument(
        "--mcp-port",
        type=int,
        default=int(os.environ.get("MCP_PORT", "8765")),
        help="the MCP server's HTTP port when agentcal-mcp is installed (0: do not start it)",
    )
    manage_parser = commands.add_parser("manage", help="run a Django management command")
    manage_parser.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "run":
        if args.mcp_port and args.mcp_port == args.port:
            # Else the web server takes the port, the MCP server fails to, and its exit stops everything.
            run_parser.error(
                f"--port and --mcp-port are both {args.port}: give the MCP server another port "
                "(--mcp-port or MCP_PORT), or 0 to leave it out"
            )
        return run(args)
    _setup_django()
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line(["agentcal", *args.rest])
    except KeyboardInterrupt:
        # Ctrl-C is how a person stops a command, or `run` and the listener it started (even while that
        # one is still starting): no traceback.
        return INTERRUPTED
    return 0


if __name__ == "__main__":
    sys.exit(main())
