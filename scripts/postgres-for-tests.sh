#!/usr/bin/env bash
# Starts a throwaway PostgreSQL on 127.0.0.1 for the store tests and prints its URL.
# Installs PostgreSQL from Debian's packages first when it is missing.
# LATCHKEY_TEST_PG_PORT: the first port to try; LATCHKEY_TEST_PG_DIR: an empty directory to keep the cluster in.
set -euo pipefail
run() { if [ "$(id -u)" = 0 ]; then su postgres -s /bin/bash -c "$*"; else bash -c "$*"; fi; }
# `postgres-for-tests.sh stop DIR` stops the server kept in DIR (LATCHKEY_TEST_PG_DIR of the start).
if [ "${1:-}" = stop ]; then
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  run "$bin/pg_ctl -D $2/data -m fast stop" >/dev/null
  exit 0
fi
port="${LATCHKEY_TEST_PG_PORT:-54329}"
# Skip ports something already listens on (another run's server, for instance).
while (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do port=$((port + 1)); done
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
dir="${LATCHKEY_TEST_PG_DIR:-$(mktemp -d /tmp/latchkey-pg.XXXXXX)}"
chown postgres "$dir"
run "$bin/initdb -D $dir/data -A trust -U latchkey" >/dev/null
run "$bin/pg_ctl -D $dir/data -o '-c listen_addresses=127.0.0.1 -p $port -k $dir' -l $dir/log -w start" >/dev/null
run "$bin/createdb -h 127.0.0.1 -p $port -U latchkey latchkey_test"
echo "postgres://latchkey@127.0.0.1:$port/latchkey_test"
