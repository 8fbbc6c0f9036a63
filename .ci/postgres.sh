#!/usr/bin/env bash
# Starts a dedicated PostgreSQL cluster for the storage tests and prints the variables they read.
#
#   eval "$(sudo .ci/postgres.sh)"
#   swift test --filter Postgres
#
# Run as root. Idempotent: installs the `postgresql` package only when missing, creates the
# cluster `keyauth` (loopback only, on the first free port from 55432) only when it does not
# exist, starts it when it is down, and (re)creates the role and database `keyauth_test`.
# TCP clients authenticate with a password (scram-sha-256), so the tests exercise the same path
# as a real deployment; local socket connections use peer authentication for this script.
#
# Progress goes to stderr; stdout carries only the `export` lines:
#   KEYAUTH_TEST_POSTGRES_URL  the database URL for the tests
#   KEYAUTH_TEST_POSTGRES_CTL  a command that takes `stop` or `start`, for the outage test
#
# Environment: KEYAUTH_PG_CLUSTER (default keyauth), KEYAUTH_PG_PORT (default 55432),
# KEYAUTH_PG_PASSWORD (default keyauth_test; URL-safe characters only, it goes into the URL as is).
set -euo pipefail

cluster="${KEYAUTH_PG_CLUSTER:-keyauth}"
first_port="${KEYAUTH_PG_PORT:-55432}"
password="${KEYAUTH_PG_PASSWORD:-keyauth_test}"
role=keyauth_test
database=keyauth_test

log() { echo "postgres.sh: $*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
    log "run as root (it installs packages and manages a cluster as the postgres user)"
    exit 1
fi

if ! command -v pg_createcluster >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql 2>/dev/null)" ]; then
    log "installing postgresql"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2
    apt-get install -y -q postgresql >&2
fi

version="$(ls /usr/lib/postgresql | sort -n | tail -n 1)"

# The cluster's port, when it exists: the third column of `pg_lsclusters -h`.
existing_port="$(pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c { print $3 }')"

port_in_use() {
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

if [ -n "$existing_port" ]; then
    port="$existing_port"
else
    port="$first_port"
    while port_in_use "$port" || pg_lsclusters -h | awk '{ print $3 }' | grep -qx "$port"; do
        port=$((port + 1))
    done
    log "creating cluster $version/$cluster on 127.0.0.1:$port"
    # Debian's package may have created the default cluster without starting it; this one is
    # separate so that the tests never touch a cluster someone else uses.
    pg_createcluster "$version" "$cluster" -p "$port" -- --auth-local=peer --auth-host=scram-sha-256 >&2
fi

# Loopback only, whatever the package's default: Debian's postgresql.conf reads conf.d last.
settings="/etc/postgresql/$version/$cluster/conf.d/keyauth-tests.conf"
wanted="listen_addresses = '127.0.0.1'"
if [ "$(cat "$settings" 2>/dev/null)" != "$wanted" ]; then
    echo "$wanted" >"$settings"
    if pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c { print $4 }' | grep -q online; then
        pg_ctlcluster "$version" "$cluster" restart >&2
    fi
fi

if ! pg_lsclusters -h | awk -v v="$version" -v c="$cluster" '$1 == v && $2 == c { print $4 }' | grep -q online; then
    log "starting cluster $version/$cluster"
    pg_ctlcluster "$version" "$cluster" start >&2
fi

for _ in $(seq 1 30); do
    if pg_isready -q -h 127.0.0.1 -p "$port"; then break; fi
    sleep 1
done
if ! pg_isready -q -h 127.0.0.1 -p "$port"; then
    log "the cluster does not accept connections on 127.0.0.1:$port"
    exit 1
fi

psql_admin() {
    runuser -u postgres -- psql -X -q -v ON_ERROR_STOP=1 -p "$port" "$@"
}

# psql variables (:'password') quote the value, so the password is never spliced into SQL.
psql_admin -v password="$password" -v role="$role" >&2 <<'SQL'
SELECT format('CREATE ROLE %I LOGIN', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'role') \gexec
SELECT format('ALTER ROLE %I LOGIN PASSWORD %L', :'role', :'password') \gexec
SQL
psql_admin -v role="$role" -v database="$database" >&2 <<'SQL'
SELECT format('CREATE DATABASE %I OWNER %I', :'database', :'role')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'database') \gexec
SQL

log "ready: $role@127.0.0.1:$port/$database"
echo "export KEYAUTH_TEST_POSTGRES_URL='postgres://$role:$password@127.0.0.1:$port/$database'"
echo "export KEYAUTH_TEST_POSTGRES_CTL='pg_ctlcluster $version $cluster'"
