#!/usr/bin/env bash
# Start a throw-away PostgreSQL server on loopback for the sweep concurrency test (sourced by .ci/run).
# Installs Debian's server package when it is missing; sets RLEXP_TEST_POSTGRES; rlexp_ci_stop_postgres (called on
# exit by .ci/run) stops the server.
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
PG_BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PG_DATA=$(mktemp -d /tmp/rlexp-pg.XXXXXX)
# a free port on loopback unless RLEXP_PG_PORT names one (a server left running elsewhere keeps its own)
PG_PORT=${RLEXP_PG_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
AS_PG=(); [ "$(id -u)" = 0 ] && { chown postgres "$PG_DATA"; AS_PG=(runuser -u postgres --); }
"${AS_PG[@]}" "$PG_BIN/initdb" -D "$PG_DATA" -A trust -U postgres >/dev/null
"${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $PG_DATA" start >/dev/null
"${AS_PG[@]}" "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U postgres rlexp_test
rlexp_ci_stop_postgres() {
  "${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$PG_DATA" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_DATA" 2>/dev/null || true
}
export RLEXP_TEST_POSTGRES="postgresql://postgres@127.0.0.1:$PG_PORT/rlexp_test"
echo "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$PG_PORT for the sweep tests"
