#!/usr/bin/env bash
# Starts PostgreSQL, RabbitMQ and Redis when they are installed but not answering, and waits
# until each answers. Shared by `npm test` and `.ci/run`. Exits non-zero naming the server that
# could not be reached and the command that starts it.
set -uo pipefail

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() { # name port seconds
  for _ in $(seq 1 $(( $3 * 5 ))); do port_open "$2" && return 0; sleep 0.2; done
  return 1
}

PG_START='pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start'
RABBIT_START='rabbitmq-server -detached'
REDIS_START='redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no'

ensure() { # name port start-command timeout
  local name=$1 port=$2 cmd=$3 timeout=$4
  if port_open "$port"; then return 0; fi
  echo "starting $name: $cmd" >&2
  bash -c "$cmd" >/dev/null 2>&1 || true
  if ! wait_port "$name" "$port" "$timeout"; then
    echo "FATAL: $name is not reachable on 127.0.0.1:$port. Start it with: $cmd" >&2
    return 1
  fi
}

failed=0
ensure PostgreSQL 5432 "$PG_START" 30 || failed=1
ensure Redis 6379 "$REDIS_START" 15 || failed=1
ensure RabbitMQ 5672 "$RABBIT_START" 90 || failed=1
if [ "$failed" = 0 ] && command -v rabbitmqctl >/dev/null 2>&1; then
  # The port opens before the broker accepts work; wait for the app to be fully booted.
  timeout 90 rabbitmqctl await_startup >/dev/null 2>&1 || true
fi
if [ "$failed" = 0 ]; then
  # The test database must exist (trust auth as user postgres).
  psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='test'" 2>/dev/null | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -c 'create database test' >/dev/null 2>&1 || true
fi
exit $failed
