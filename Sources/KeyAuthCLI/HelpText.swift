/// The text of `--help`, one page per command.
enum HelpText {
    static let overview = """
        usage: keyauth <command> [options]

        Log in to a keyauth server with a device key instead of a password.

        commands:
          register   generate a device key and register it with a server
          login      prove presence, sign an assertion, get and store an access token
          token      print a valid access token, logging in again when it has expired
          proof      print a DPoP proof for one request with the stored token
          logout     forget the stored access token; keep the key and the registration
          status     show accounts, key fingerprints and token expiry
          devices    list, approve or revoke this user's devices
          pubkey     print this device's public key (PEM or JWK)
          pin        change the PIN of the device key (`keyauth pin change`)
          default    show or set the account used without --account
          reset      revoke the key on the server, then delete it and the account here
          requests   show sign-in requests waiting for this user's approval (--watch: wait)
          approve    approve a sign-in request after checking its code and presence
          deny       deny a sign-in request
          agent      hold the unlocked key for a while, so login and token ask no PIN
          recovery-codes
                     make 10 one-time codes that enrol a new device when every device is lost
          ssh        get an SSH certificate for the device key (`keyauth ssh cert`, `ssh config`)
          attest     prove again that the device key is in a TPM, to raise its tier on the server

        options:
          -h, --help     show help (also `keyauth <command> --help`)
          -V, --version  show the version

        State lives in $KEYAUTH_HOME (default $XDG_DATA_HOME/keyauth, else ~/.local/share/keyauth).
        KEYAUTH_TIMEOUT sets the server timeout in seconds (default 10).
        KEYAUTH_TPM_TCTI selects the TPM (default device:/dev/tpmrm0, the kernel's resource manager).
        Exit status: 0 ok, 64 usage error, 65 corrupt or unprotected key or account file,
        69 server or TPM unreachable, 75 rate-limited, or waiting for approval (try again later),
        77 presence check failed or login refused, 130 Control-C
        (143 SIGTERM, 129 SIGHUP), 1 anything else.
        """

    static func page(for command: CommandName) -> String {
        switch command {
        case .register:
            """
            usage: keyauth register --server URL --user NAME [options]

            Checks presence, generates a device key, registers it with proof of possession and
            logs in. A user's first device needs a one-time enrollment code from an administrator
            (`keyauth-server enroll USER`) unless the server's enrollment is open. A further
            device waits until an existing device runs `keyauth devices approve KID` (or is given
            a code); meanwhile it says until when, and Control-C leaves it pending.
            With a TPM (KEYAUTH_TPM_TCTI, default device:/dev/tpmrm0) the key is made in the TPM
            and never leaves it; the choice is printed and remembered.

            options:
              --server URL            the server's base URL (https://, or http:// on loopback)
              --user NAME             the user name on the server
              --name DEVICE           the device name (default: this host's name)
              --key-store tpm|file|auto
                                      where the key lives (default auto: the TPM when one
                                      answers, else a key file)
              --bits 2048|3072|4096   key size (default 3072; in a TPM, 3072 where it can,
                                      else 2048)
              --presence pin|pam|none how to check presence (default pin: in a TPM, a PIN of
                                      at least 4 characters that the TPM checks and limits;
                                      in a key file, one of at least 6 that encrypts it)
              --pam-service NAME      the PAM service with --presence pam (default keyauth)
              --pin-stdin             read the PIN from standard input, once
              --enrollment-code CODE  a one-time code from `keyauth-server enroll`; `-` reads it
                                      from standard input (before the PIN with --pin-stdin)
              --recovery-code CODE    one of the user's codes from `keyauth recovery-codes`,
                                      when every device is lost: the device is active at once
                                      and the code used up; `-` reads it as --enrollment-code -
              --account NAME          the account name (default USER@HOST:PORT)
              --no-wait               when approval is needed, print what to approve and
                                      exit 75 at once (the device stays pending)
              --insecure-http         allow plain http:// to a host that is not loopback
                                      (tokens cross the network readable); remembered
            """
        case .login:
            """
            usage: keyauth login [--account NAME] [--pin-stdin] [--no-wait]

            Checks presence, signs an assertion with the device key, and stores a new access token.
            While the device waits for approval it polls every 5 seconds (--no-wait: exit 75).
            """
        case .token:
            """
            usage: keyauth token [--account NAME] [--pin-stdin]

            Prints a valid access token on standard output. A stored token is reused unless it
            expires within 30 seconds, with no presence check and no terminal needed (cron jobs,
            services); otherwise it logs in again (presence check included).
            The token is a Bearer token unless the server requires DPoP: then it is bound to
            the device key, and each request needs a proof of its own from `keyauth proof`
            (see `keyauth proof --help`).
            """
        case .attest:
            """
            usage: keyauth attest [--account NAME] [--pin-stdin]

            Proves to the server again that this device's key is in a TPM, as an attested
            registration does (the TPM certifies the key and answers the server's challenge), so
            that the tier the server records for the device rises without registering a new key:
            after the server's operator added the TPM maker's root (tier attested), or for a
            device registered before attestation (tier software). Run it when a login is refused
            by the server's device policy. The tier never goes down; the answer says what the
            server records now, and why not attested when it is not. Asks for the PIN of a
            PIN-protected key. A device whose key is a key file has nothing to attest (exit 1).
            """
        case .recoveryCodes:
            """
            usage: keyauth recovery-codes [--account NAME] [--pin-stdin]

            Checks presence, then asks the server for 10 new one-time recovery codes for the
            account's user and prints them: the only time they are shown (the server keeps only
            slow hashes). The previous codes stop working. When every device is lost, one code
            enrols a new device with `keyauth register` (its recovery code option). The user's
            other devices are told when a code is used. The account page shows how many are left
            and can make a new set with a device's approval.
            """
        case .agent:
            """
            usage: keyauth agent [--account NAME] [--timeout DURATION] [--pin-stdin] [--background]
                   keyauth agent --lock
                   keyauth agent --stop

            Checks presence once (the PIN of a PIN-protected key), then holds the account's
            unlocked key, or a TPM key's PIN, in locked memory for DURATION (default 8h; forms
            such as 30m, 1h30m, 90s). `keyauth login`, `token` and `proof` sign through it without
            asking; the key never leaves the agent. It runs in the foreground on the socket
            $XDG_RUNTIME_DIR/keyauth/agent.sock (0600, in a 0700 directory, and only processes of
            the same uid are answered); without XDG_RUNTIME_DIR (usually /run/user/UID) it refuses
            to start.
            Run it again to unlock a locked agent.
              --background  detach the agent after the presence check and print shell lines
                            for eval, as ssh-agent does: eval "$(keyauth agent --background)"
              --lock        clear the held key; the agent keeps running, locked
              --stop        clear the held key and end the agent
            """
        case .logout:
            """
            usage: keyauth logout [--account NAME]

            Deletes the stored access token. The device key and its registration stay, so
            `keyauth login` signs in again.
            """
        case .proof:
            """
            usage: keyauth proof METHOD URL [--account NAME] [--pin-stdin] [--nonce VALUE]

            Prints a DPoP proof (RFC 9449) for one request of METHOD to URL, signed with the
            device key and bound to the account's stored DPoP-bound token (as printed by
            `keyauth token`), for a request's DPoP header. Each request needs a proof of its own.
            Signing needs the key: a PIN-protected key asks for its PIN (or reads it with
            --pin-stdin); other keys sign without asking. With no valid stored token it logs
            in first, so that the proof matches the token `keyauth token` prints next.

            options:
              --account NAME  the account (default: the only one, or the default account)
              --pin-stdin     read the PIN from standard input
              --nonce VALUE   the server's DPoP-Nonce, when it answered use_dpop_nonce

            For a script's curl:
              curl -H "Authorization: DPoP $(keyauth token)" -H "DPoP: $(keyauth proof GET URL)" URL
            """
        case .status:
            """
            usage: keyauth status [--account NAME] [--json]

            Shows every account (or one): server, user, device, key fingerprint, key store (tpm,
            with the TPM's manufacturer, or file), presence check, registration state, token
            expiry, and whether `keyauth agent` holds the key or is locked. --json prints a JSON
            document on standard output.
            """
        case .devices:
            """
            usage: keyauth devices [list | approve [KID] | revoke KID] [--account NAME] [--pin-stdin] [--json]

            list          the user's devices, their state and the address each registered
                          from (default; 100 a page, at most 1000; pending ones marked !)
            approve KID   let a pending device of the same user log in; prints its name,
                          creation time and address
            approve       list the pending devices and ask which one to approve
            revoke KID    revoke a device, or deny a pending one

            A KID may be shortened to any unique prefix of 8 or more characters, such as the
            short code a pending registration prints.
            """
        case .ssh:
            """
            usage: keyauth ssh cert [--write PATH] [--account NAME] [--pin-stdin]
                   keyauth ssh config [--account NAME]

            ssh cert asks the server for an OpenSSH user certificate of this device's key (the
            server certifies the key it registered; none is sent), saves it beside the key as
            device-key.pem-cert.pub, where ssh looks for it (or at PATH), prints its line, and
            says until when it is valid.
            Hosts that trust the server's CA (`keyauth-server ssh-ca show`) let it in for the
            principals it names. ssh config prints the ~/.ssh/config lines that log in with the
            key file and that certificate; ssh asks for the key's PIN as its passphrase. A TPM
            key cannot be read by ssh as a file.
            """
        case .pubkey:
            """
            usage: keyauth pubkey [--account NAME] [--jwk]

            Prints the device's public key as SPKI PEM, or as a JWK with --jwk.
            """
        case .defaultAccount:
            """
            usage: keyauth default [ACCOUNT]

            Sets the account that commands use when none is named; without ACCOUNT, prints it.
            ACCOUNT, as wherever an account is named, may be shortened to the user name (alice
            for alice@host:8088) when only one account starts with it.
            """
        case .pin:
            """
            usage: keyauth pin change [--account NAME] [--pin-stdin]

            Asks for the current PIN, then twice for a new one, and protects the device key with
            the new PIN in place: a key file is encrypted again; a TPM key's PIN is its TPM
            authorization value, which the TPM changes (the blob is replaced; a TPM key's PIN
            needs 4 characters, a key file's 6). The key ID stays and the device stays
            registered. --pin-stdin reads the current PIN from the first line of standard input
            and the new one from the second.
            """
        case .reset:
            """
            usage: keyauth reset [--account NAME] [--local-only] [--pin-stdin] [--yes]

            Revokes the device key on the server, then deletes the key, the account and its tokens
            here. The revocation uses the stored access token while it is valid, with no presence
            check (on a server that requires DPoP, its proof is signed with the device key: a
            PIN-protected key asks for the PIN unless keyauth agent holds the key); otherwise it
            logs in first, with the presence check. --local-only skips the server (when it is
            gone); the key stays registered there. A device the server has refused is deleted
            here without asking for the PIN. On a terminal it asks for confirmation first; --yes
            skips the question.

            Forgot the PIN? Run keyauth reset --local-only, then keyauth register again with one
            of your recovery codes, with an enrollment code from an administrator, or with
            neither and approve the new device from another of yours (keyauth devices approve);
            keyauth register --help names the options. Then revoke the old key: keyauth devices
            revoke KID, the account page, or an administrator (keyauth-server revoke KID).
            """
        case .requests:
            """
            usage: keyauth requests [--watch | --json] [--account NAME] [--pin-stdin]

            Lists the sign-in requests waiting for this user's approval: applications that asked
            the server to sign the user in (OpenID CIBA) and the server's account page. --json
            prints them as one JSON document instead of a table. --watch waits for new ones, shows
            a desktop notification when a graphical session is present, and for each asks for the
            code shown on the other screen to approve it (or `deny`, or an empty line to leave
            it); Control-C stops.
            """
        case .approve:
            """
            usage: keyauth approve [ID] [--account NAME] [--pin-stdin]

            Approves a sign-in request: the one whose ID starts with ID (its first 8 characters
            are enough when no other open request shares them), or the only open one when no ID
            is given (or a choice when there are several). Shows the application, where the request came from and when,
            never its code; asks you to type the code shown on the screen that started the
            sign-in (a mistyped code is asked again, and the third denies the request; `deny`
            denies); then checks presence and signs the approval with the device key. Standard
            input that is not a terminal gives the code on its first lines, then the PIN with
            --pin-stdin. Exit status 1 when the request expired, was answered elsewhere or was
            denied by wrong codes, 77 when the presence check fails.
            """
        case .deny:
            """
            usage: keyauth deny ID [--account NAME] [--pin-stdin]

            Denies a sign-in request: the application learns access_denied. ID may be shortened
            to its first 8 characters, as for approve.
            """
        case .help:
            "usage: keyauth help [COMMAND]"
        }
    }
}
