#!/usr/bin/env bash
# Host login benchmark: a local online login through the PAM module, as `sudo` or `login` would
# run it, with an RSA-3072 key file and its PIN: `pamtester SERVICE USER authenticate` against a
# stack of pam_keyauth.so alone, next to the same pamtester run on a pam_permit.so stack (the
# floor: pamtester and libpam), to `keyauth login --pin-stdin` run as the user (the same login
# without PAM), and to `keyauth login` of an account without a PIN (so that the PIN's own cost,
# the key file's key derivation, is the difference of the two), alternated in one run; then, with
# the server stopped, the same pamtester login offline by the grant the online runs left
# (docs/HOST-LOGIN.md, "Offline"). Also `ssh` logins through two sshd on loopback
# (keyboard-interactive through PAM, the PIN typed by SSH_ASKPASS): the module's stack against
# the floor's, so the module's cost in an ssh login shows without anyone waiting. Needs root (a
# Linux user and /etc/pam.d files are made for the run and removed after), pamtester and sshd.
#
#   bash Benchmarks/pam/run.sh [RUNS]
#
# KEYAUTH_BENCH_BIN=DIR uses the release binaries in DIR (.build-deb/release after
# scripts/build-deb.sh) instead of building them.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-20}
[ "$(id -u)" -eq 0 ] || { echo "run as root: it creates a user and /etc/pam.d services" >&2; exit 1; }
command -v pamtester >/dev/null || { echo "pamtester is not installed" >&2; exit 1; }

# shellcheck source=Benchmarks/release-bin.sh
source Benchmarks/release-bin.sh
work=$(mktemp -d /tmp/keyauth-pam-bench.XXXXXX)
chmod 0755 "$work"
suffix=$(basename "$work" | tr -dc 'a-z0-9' | tail -c 6)
user=kabench$suffix
service=keyauth-bench-$suffix
server_pid=""
sshd_pids=()
cleanup() {
    [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
    for pid in "${sshd_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -f "/etc/pam.d/$service" "/etc/pam.d/$service-floor" "/var/lib/keyauth-pam/$user.grant"
    userdel --remove "$user" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
bash scripts/build-pam-module.sh "$work/pam_keyauth.so"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$bin/keyauth-server" serve --listen "127.0.0.1:$port" --db "$work/server.db" --quiet --enrollment open \
    --metrics-listen off 2>/dev/null &
server_pid=$!
for _ in $(seq 1 100); do curl -fs -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
issuer="http://127.0.0.1:$port"

useradd --create-home --shell /bin/sh "$user"
home=/home/$user
pin=482916
KEYAUTH_HOME=$home/.local/share/keyauth HOME=$home "$bin/keyauth" register --server "$issuer" --user "$user" \
    --bits 3072 --key-store file --pin-stdin <<<"$pin" >/dev/null 2>&1
# A second account of the same user without a PIN (the helper never uses it: its keyauth user
# has another name), only to measure what the PIN costs.
KEYAUTH_HOME=$home/.local/share/keyauth HOME=$home "$bin/keyauth" register --server "$issuer" \
    --user "$user-nopin" --bits 3072 --key-store file --presence none >/dev/null 2>&1
chown -R "$user:$user" "$home/.local"
cp "$bin/keyauth" "$work/keyauth"
chmod 0755 "$work/keyauth"
# The helper is keyauth under another name, as the package installs it.
ln -s "$work/keyauth" "$work/keyauth-pam-helper"

printf 'auth required %s helper=%s server=%s insecure_http\naccount required pam_permit.so\n' \
    "$work/pam_keyauth.so" "$work/keyauth-pam-helper" "$issuer" >"/etc/pam.d/$service"
printf 'auth required pam_permit.so\naccount required pam_permit.so\n' >"/etc/pam.d/$service-floor"

# Two sshd on loopback, keyboard-interactive through PAM only: one with the module's stack, one
# with the floor's. OpenSSH names its PAM service after the program, so each runs through a link
# of that name; ssh answers the module's PIN prompt through SSH_ASKPASS.
mkdir -p /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
printf '#!/bin/sh\necho %s\n' "$pin" >"$work/askpass"
chmod 0755 "$work/askpass"
sshd_ports=()
for name in "$service" "$service-floor"; do
    sshd_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    printf '%s\n' "Port $sshd_port" "ListenAddress 127.0.0.1" "HostKey $work/host_key" "PidFile $work/$name.pid" \
        "StrictModes no" "AuthorizedKeysFile none" "PubkeyAuthentication no" "PasswordAuthentication no" \
        "KbdInteractiveAuthentication yes" "AuthenticationMethods keyboard-interactive" "UsePAM yes" \
        "PermitRootLogin no" >"$work/$name.conf"
    ln -s /usr/sbin/sshd "$work/$name"
    "$work/$name" -D -f "$work/$name.conf" 2>/dev/null &
    sshd_pids+=($!)
    sshd_ports+=("$sshd_port")
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$sshd_port") 2>/dev/null && break; sleep 0.05; done
done

python3 - "$service" "$user" "$pin" "$work/keyauth" "$runs" "$port" "$server_pid" "${sshd_ports[0]}" \
    "${sshd_ports[1]}" "$work/askpass" <<'PY'
import os, signal, statistics, subprocess, sys, time
service, user, pin, keyauth, runs, port = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
server_pid = int(sys.argv[7])
ssh_module_port, ssh_floor_port, askpass = sys.argv[8], sys.argv[9], sys.argv[10]
def ssh(ssh_port):
    return ["ssh", "-F", "/dev/null", "-p", ssh_port, "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "PreferredAuthentications=keyboard-interactive",
            "-o", "NumberOfPasswordPrompts=1", "-o", "IdentityAgent=none", f"{user}@127.0.0.1", "true"]
ssh_environment = dict(os.environ, SSH_ASKPASS=askpass, SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
def timed_ssh(ssh_port):
    start = time.perf_counter()
    subprocess.run(ssh(ssh_port), check=True, env=ssh_environment, stdin=subprocess.DEVNULL,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return time.perf_counter() - start
def timed(command):
    start = time.perf_counter()
    subprocess.run(command, check=True, input=pin + "\n", text=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start
as_user = ["runuser", "-u", user, "--", keyauth, "login", "--account"]
module, floor, direct, nopin = [], [], [], []
for _ in range(runs):
    module.append(timed(["pamtester", service, user, "authenticate"]))
    floor.append(timed(["pamtester", service + "-floor", user, "authenticate"]))
    direct.append(timed(as_user + [f"{user}@127.0.0.1:{port}", "--pin-stdin"]))
    nopin.append(timed(as_user + [f"{user}-nopin@127.0.0.1:{port}"]))
ssh_module, ssh_floor = [], []
for _ in range(runs):
    ssh_module.append(timed_ssh(ssh_module_port))
    ssh_floor.append(timed_ssh(ssh_floor_port))
# Offline: the server stopped, the grant of the last online login decides (with the PIN).
os.kill(server_pid, signal.SIGTERM)
# Until the port is closed: a server still draining answers 503, which is a refusal, not offline.
import socket
for _ in range(200):
    try:
        socket.create_connection(("127.0.0.1", int(port)), timeout=1).close()
        time.sleep(0.05)
    except OSError:
        break
offline = [timed(["pamtester", service, user, "authenticate"]) for _ in range(runs)]
ms = lambda values: statistics.median(values) * 1000
added = ms(module) - ms(floor)
pin_cost = ms(direct) - ms(nopin)
print(f"host login, RSA-3072 key file with a PIN, {runs} alternating runs (median wall time)")
print(f"  pamtester, pam_keyauth.so                  {ms(module):8.1f} ms")
print(f"  pamtester, pam_permit.so (floor)           {ms(floor):8.1f} ms")
print(f"  added by pam_keyauth                       {added:8.1f} ms")
print(f"  keyauth login --pin-stdin as the user      {ms(direct):8.1f} ms")
print(f"  keyauth login, account without a PIN       {ms(nopin):8.1f} ms")
print(f"  the PIN's own cost (difference)            {pin_cost:8.1f} ms")
print(f"  added by pam_keyauth beyond the PIN        {added - pin_cost:8.1f} ms  (target < 150 ms)")
print(f"  ssh, keyboard-interactive, pam_keyauth     {ms(ssh_module):8.1f} ms")
print(f"  ssh, keyboard-interactive, pam_permit.so   {ms(ssh_floor):8.1f} ms")
print(f"  added to ssh beyond the PIN                {ms(ssh_module) - ms(ssh_floor) - pin_cost:8.1f} ms")
print(f"  pamtester offline, by grant, server down   {ms(offline):8.1f} ms")
print(f"  load average at the end                    {os.getloadavg()[0]:8.2f}")
PY
