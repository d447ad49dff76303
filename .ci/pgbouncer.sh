#!/usr/bin/env bash
# PgBouncer in transaction mode in front of this machine's PostgreSQL, for CI and for trying it by hand.
#
#   .ci/pgbouncer.sh start   # writes pgbouncer.ini + userlist.txt, starts it on a free port, prints the port
#   .ci/pgbouncer.sh stop
#
# PGBOUNCER_DIR (default /tmp/agentcal-pgbouncer) holds the config, log and pid file. The upstream is
# PGHOST:PGPORT (127.0.0.1:5432), trust auth as user postgres, every database name passed through (`*`),
# so pytest's test databases work through it. PGBOUNCER_POOL_SIZE server connections per database
# (default 20) are shared by up to 2000 clients. Debian's package is apt-get install pgbouncer.
set -euo pipefail

DIR="${PGBOUNCER_DIR:-/tmp/agentcal-pgbouncer}"
UPSTREAM_HOST="${PGHOST:-127.0.0.1}"
UPSTREAM_PORT="${PGPORT:-5432}"
POOL_SIZE="${PGBOUNCER_POOL_SIZE:-20}"

as_owner() {
  # PgBouncer refuses to run as root: run it as the postgres user, who owns its folder.
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$*"; else sh -c "$*"; fi
}

stop() {
  if [ -f "$DIR/pgbouncer.pid" ]; then
    pid="$(cat "$DIR/pgbouncer.pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$DIR/pgbouncer.pid"
  fi
}

start() {
  command -v pgbouncer >/dev/null || { echo "pgbouncer is not installed (apt-get install pgbouncer)" >&2; exit 1; }
  stop
  mkdir -p "$DIR"
  port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  printf '"postgres" ""\n' >"$DIR/userlist.txt"
  cat >"$DIR/pgbouncer.ini" <<INI
[databases]
; Every database name is passed on. timezone: what the server connections are set to on connect and what
; clients are told at login, so Django finds UTC and sends no SET TIME ZONE (docs/scaling.md).
* = host=$UPSTREAM_HOST port=$UPSTREAM_PORT timezone=UTC

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
; A server connection is lent for one transaction at a time: nothing session-scoped survives between two.
pool_mode = transaction
default_pool_size = $POOL_SIZE
max_client_conn = 2000
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
INI
  if [ "$(id -u)" = 0 ]; then chown -R postgres "$DIR"; fi
  as_owner "pgbouncer -d '$DIR/pgbouncer.ini'"
  for _ in $(seq 50); do
    if pg_isready -q -h 127.0.0.1 -p "$port"; then echo "$port"; return 0; fi
    sleep 0.1
  done
  echo "pgbouncer did not start; its log:" >&2
  tail -20 "$DIR/pgbouncer.log" >&2 || true
  exit 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
