#!/usr/bin/env python3
"""Forwards a software TPM's two TCP ports and logs every TPM command that goes through.

    tpm-command-log.py LISTEN_PORT TPM_PORT LOG_FILE

Listens on 127.0.0.1:LISTEN_PORT (commands) and LISTEN_PORT + 1 (swtpm's control channel),
forwards each connection to TPM_PORT and TPM_PORT + 1, and appends one line per TPM 2.0
command sent on the command port to LOG_FILE: the command code in hex and its name. A TCTI
string `swtpm:host=127.0.0.1,port=LISTEN_PORT` then reaches the TPM through it, so that a
benchmark counts the commands of one `keyauth` run by the lines it added.

A command is read from its header (TPM 2.0 Part 1: a 2-byte tag, a 4-byte size counting the
header, a 4-byte command code), so a command split over several reads counts once.
"""

import socket
import sys
import threading

NAMES = {
    0x011F: "NV_DefineSpace", 0x0131: "CreatePrimary", 0x0144: "Startup", 0x0147: "ActivateCredential",
    0x0148: "Certify", 0x014E: "NV_Read", 0x0151: "PolicySecret", 0x0153: "Create", 0x0157: "Load",
    0x015B: "HMAC", 0x015D: "Sign", 0x0161: "ContextLoad", 0x0162: "ContextSave", 0x0165: "FlushContext",
    0x0169: "NV_ReadPublic", 0x016C: "PolicyCommandCode", 0x0173: "ReadPublic", 0x0174: "RSA_Encrypt",
    0x0176: "StartAuthSession", 0x017A: "GetCapability", 0x017B: "GetRandom", 0x017E: "PCR_Read",
    0x0189: "PolicyGetDigest", 0x018A: "TestParms", 0x0191: "CreateLoaded", 0x0128: "ObjectChangeAuth",
    0x0159: "RSA_Decrypt", 0x015C: "GetTestResult", 0x0143: "SelfTest",
}


def pump(source, destination, log=None, lock=None):
    """Copies bytes from source to destination; with a log, records each whole command."""
    pending = b""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            destination.sendall(data)
            if log is None:
                continue
            pending += data
            while len(pending) >= 10:
                size = int.from_bytes(pending[2:6], "big")
                if size < 10 or len(pending) < size:
                    break
                code = int.from_bytes(pending[6:10], "big")
                pending = pending[size:]
                with lock:
                    with open(log, "a") as file:
                        file.write(f"0x{code:04x} {NAMES.get(code, 'unknown')}\n")
    except OSError:
        pass
    finally:
        for end in (source, destination):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listen_port, target_port, log, lock):
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(16)
    while True:
        client, _ = listener.accept()
        tpm = socket.create_connection(("127.0.0.1", target_port))
        threading.Thread(target=pump, args=(client, tpm, log, lock), daemon=True).start()
        threading.Thread(target=pump, args=(tpm, client), daemon=True).start()


def main():
    listen_port, tpm_port, log = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    lock = threading.Lock()
    threading.Thread(target=serve, args=(listen_port + 1, tpm_port + 1, None, lock), daemon=True).start()
    serve(listen_port, tpm_port, log, lock)


if __name__ == "__main__":
    main()
