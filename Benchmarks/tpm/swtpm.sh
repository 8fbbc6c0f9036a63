# shellcheck shell=bash
# Sourced by the benchmark scripts: a software TPM (swtpm) with a fresh state on loopback.
#
#   source Benchmarks/tpm/swtpm.sh
#   start_swtpm "$work"      # sets tpm_tcti; the TPM's state goes in $work/state
#   stop_swtpm "$work"       # in the EXIT trap
#
# swtpm changes its working directory when it daemonizes, so the state directory must be
# absolute ($work from mktemp is); --flags not-need-init,startup-clear makes it usable at once.

# Prints a loopback port P such that P and P + 1 were both free a moment ago.
free_port_pair() {
    python3 -c 'import socket
for _ in range(100):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0)); port = a.getsockname()[1]; b.bind(("127.0.0.1", port + 1))
        print(port); break
    except OSError:
        pass
    finally:
        a.close(); b.close()'
}

# Starts swtpm on a free pair of loopback ports (commands on P, control on P + 1).
start_swtpm() {
    local work=$1 port
    port=$(free_port_pair)
    mkdir "$work/state"
    swtpm socket --tpm2 --tpmstate dir="$work/state" --server type=tcp,bindaddr=127.0.0.1,port="$port" \
        --ctrl type=tcp,bindaddr=127.0.0.1,port=$((port + 1)) --flags not-need-init,startup-clear \
        --pid file="$work/swtpm.pid" --log file=- --daemon
    # shellcheck disable=SC2034 # read by the scripts that source this file
    tpm_tcti="swtpm:host=127.0.0.1,port=$port"
}

# Stops the swtpm that start_swtpm started in $1, if any.
stop_swtpm() {
    if [ -f "$1/swtpm.pid" ]; then kill "$(cat "$1/swtpm.pid")" 2>/dev/null || true; fi
}
