extension ServerCommand {
    /// The help text of `keyauth-server --help`.
    package static let helpText = """
        usage: keyauth-server [serve] [options]
               keyauth-server check-config [options]
               keyauth-server enroll USER [--db PATH]
               keyauth-server devices [--user USER] [--status STATUS] [--json] [--db PATH]
               keyauth-server approve KID [--db PATH]
               keyauth-server revoke KID [--db PATH]
               keyauth-server keys [list] [--json] [--db PATH]
               keyauth-server keys rotate [--alg RS256|ES256|EdDSA] [--delay DURATION] [--db PATH]
                                          [--signing-key-bits N]
               keyauth-server clients add NAME [--redirect-uri URI]... [--post-logout-redirect-uri URI]...
                              [--public] | list [--json] | remove ID [--db PATH]
               keyauth-server users [--json] [--db PATH]
               keyauth-server delete-user USER [--db PATH]
               keyauth-server codes list [--json] | revoke USER [--db PATH]
               keyauth-server audit [--since DURATION|TIME] [--json] [--db PATH]
               keyauth-server backup FILE [--db PATH]
               keyauth-server ssh-ca init [--alg ed25519|ecdsa|rsa] | show | krl FILE | rotate | retire
                   --ssh-ca-key-file PATH

        Device-key login server for keyauth (JWT bearer assertions, RFC 7523), with sign-in by
        approval on a device (OpenID CIBA) and an account page.

        keys lists the signing keys (KID, ALG, STATE next|current|previous|id-tokens|retired,
        dates; id-tokens is a previous RS256 key that still signs ID tokens). keys rotate makes a
        new key (--alg, default KEYAUTH_SERVER_TOKEN_ALG, else the current key's algorithm) that
        every server publishes at its next cleanup (within a minute) and that signs after --delay
        (default 10m, so that caches of the JWK set see it first); it prints the new KID. The old
        key stays published until its last token expires (--token-lifetime, as the servers use),
        then the servers retire it.
        With --signing-key-file there is nothing to rotate.

        ssh-ca rotate puts a new SSH CA key in --ssh-ca-key-file and keeps the old CA published
        beside it for --overlap (default 8d) or until ssh-ca retire; servers follow at their next
        cleanup. See keyauth-server ssh-ca --help.

        serve options (environment variable in brackets; each is also a key of the settings file):
        \(serveOptions)
          -h, --help                this text
          -V, --version             print the version

        clients add NAME prints the client_id and client_secret of a new client application for
        push sign-in (/bc-authorize, CIBA poll mode), once; with --redirect-uri (repeatable: https,
        or http to a loopback host) it is an OpenID Connect relying party of /authorize, with
        --post-logout-redirect-uri one of /end-session, and --public makes it a native app with no
        secret that uses PKCE alone; --kind host makes a Linux host of push login (pam_keyauth),
        --allow-user USER (repeatable) the users who may log in to it. clients list and clients
        remove ID manage them. The account page is at /account.

        check-config validates the options, variables and settings file as serve would, and
        prints every setting's effective value and where it came from (a password in a
        postgres:// URL masked).

        Admin commands: enroll prints a one-time enrollment code for USER, alone on standard
        output (the message goes to standard error). devices lists devices in aligned columns
        (KID USER STATUS TIER CREATED LAST_LOGIN NAME), or as a JSON array with --json; --user and
        --status (active, pending, expired, denied, revoked) choose which. approve and revoke
        take a key ID or a prefix of at least 8 characters; a prefix that matches several
        devices is refused with the list of them. revoke revokes an active device or denies a
        pending one. users lists users with their devices counted by state. delete-user
        revokes every device of USER, then deletes the user's devices and enrollment codes; the
        SSH revocation list keeps naming the deleted devices for 7 days and 5 minutes, until
        their last certificate has expired.
        codes list shows the enrollment codes still usable (by a short ID of their hash);
        codes revoke USER deletes that user's unused codes.

        audit prints the administrative actions (enroll, approve, deny, revoke, and the other
        changes admin commands and devices make) oldest first in aligned columns: all of them, or
        those since a duration ago (90s, 30m, 24h, 7d) or a UTC time (2026-12-01T08:00:00Z or
        2026-12-01).

        Every listing (devices, users, codes list, keys list, clients list, audit) prints aligned
        columns with a header, names and details last and as stored; with --json it prints one
        JSON array of objects instead.

        backup copies a SQLite database, even while serve runs, into the new FILE (mode 600: it
        holds the signing key) with SQLite's online backup API; for PostgreSQL use pg_dump.

        The admin commands take --db (or KEYAUTH_SERVER_DB, or db in the settings file)
        and --config too, and never create a database: only serve does.

        A DURATION is a number of seconds (90) or numbers each with a unit s, m, h or d (90s, 5m,
        1h30m, 2d), for every option that takes one.

        The server stops gracefully on SIGTERM, SIGINT or SIGHUP. Exit status: 0 success, 64 usage error,
        65 a database or signing key file other users can read or that belongs to another user,
        or a signing key file that is missing or not a usable key, or a principals file that is
        exposed or does not parse (ssh-ca krl), 66 an SSH CA key file that does not exist (ssh-ca
        show, rotate, krl) or a principals file (ssh-ca krl), 69 storage or address unavailable (or no database for
        an admin command), 78 a settings file that cannot be read or has a bad line (the message
        names the file and line), 1 anything else.

        """

    /// The options of `serve` (and `check-config`), one block shared by `--help` and
    /// `serve --help`, so that the two cannot disagree.
    static let serveOptions = """
          --config FILE             settings file of key = value lines, the key being an option's
                                    name without dashes (listen = 127.0.0.1:8088), a true/false
                                    key alone meaning true, and # at the start of a line or after
                                    a space starting a comment; default /etc/keyauth/server.conf
                                    when it exists [KEYAUTH_SERVER_CONFIG]. A flag wins over its
                                    variable, which wins over the file, which wins over the default
          --listen HOST:PORT        address to listen on, default 127.0.0.1:8088 [KEYAUTH_SERVER_LISTEN]
          --issuer URL              public base URL, iss and aud of tokens, default http://HOST:PORT
                                    [KEYAUTH_SERVER_ISSUER]
          --db PATH|postgres://...  storage, default keyauth-server.db in the current directory
                                    [KEYAUTH_SERVER_DB]; a SQLite file holds the signing key:
                                    it must be mode 600 and owned by the server's user
          --enrollment code|open    whether a new user's first device needs a code from 'enroll',
                                    default code; open is for development on loopback (refused
                                    with --ssh-ca-key-file) [KEYAUTH_SERVER_ENROLLMENT]
          --dpop optional|required  whether access tokens must be bound to the device key with a
                                    DPoP proof (RFC 9449); optional (default) still issues Bearer
                                    tokens to requests without a proof [KEYAUTH_SERVER_DPOP]
          --dpop-nonce              require DPoP proofs to carry a nonce from the server's
                                    DPoP-Nonce header [KEYAUTH_SERVER_DPOP_NONCE=1]
          --tpm-ca FILE|DIR         PEM roots (and intermediates) of TPM makers' endorsement key
                                    certificates: a TPM-attested device whose certificate chains
                                    to one registers as attested, else as tpm-unverified; a
                                    directory is read for *.pem, *.crt and *.cer [KEYAUTH_SERVER_TPM_CA]
          --device-policy any|tpm|attested
                                    which device tiers may register and log in, default any
                                    [KEYAUTH_SERVER_DEVICE_POLICY]
          --device-policy-mode monitor|enforce
                                    enforce (default) refuses devices below --device-policy;
                                    monitor lets them in, logs them and counts them in /metrics
                                    [KEYAUTH_SERVER_DEVICE_POLICY_MODE]
          --metrics-listen HOST:PORT|off
                                    where /metrics and /healthz are served, apart from the public
                                    listener; default 127.0.0.1 on the --listen port + 1
                                    [KEYAUTH_SERVER_METRICS_LISTEN]
          --trust-proxy             count the last X-Forwarded-For hop as the client address; only
                                    behind a proxy that sets it [KEYAUTH_SERVER_TRUST_PROXY=1]
          --rate-limit N            failed logins/registrations per address and minute, default 10
                                    [KEYAUTH_SERVER_RATE_LIMIT]; an address is an IPv4 address or
                                    an IPv6 /64
          --registration-limit N    registrations per address and minute, successful or not,
                                    default 20 [KEYAUTH_SERVER_REGISTRATION_LIMIT]
          --token-lifetime DURATION access token lifetime, default 15m [KEYAUTH_SERVER_TOKEN_LIFETIME]
          --offline-grant-lifetime DURATION
                                    how long a host login's offline grant lets the device log in
                                    to that host without the server, 1h to 30d, default 7d
                                    [KEYAUTH_SERVER_OFFLINE_GRANT_LIFETIME]
          --threads N               HTTP worker threads, default one per core (at least 2) with
                                    SQLite, 32 with PostgreSQL [KEYAUTH_SERVER_THREADS]
          --db-connections N        connections to PostgreSQL, each held by one storage call at
                                    a time, 1 to 256, default 4 [KEYAUTH_SERVER_DB_CONNECTIONS]
          --cleanup-interval DURATION
                                    time between purges of expired entries, which also reload
                                    the signing keys and retire old ones, default 1m
                                    [KEYAUTH_SERVER_CLEANUP_INTERVAL]
          --max-connections N       simultaneous connections, default 1000 [KEYAUTH_SERVER_MAX_CONNECTIONS]
          --max-connections-per-address N
                                    simultaneous connections from one IP address (an IPv6
                                    /64 counts as one), 0 for no limit;
                                    default 32, or 0 with --trust-proxy (limit at the proxy)
                                    [KEYAUTH_SERVER_MAX_CONNECTIONS_PER_ADDRESS]
          --request-timeout DURATION
                                    time a connection has to send each whole request, from its
                                    start or the previous response, and to take each response
                                    (after the time its size needs at 16 KiB/s), default 10s
                                    [KEYAUTH_SERVER_REQUEST_TIMEOUT]
          --connection-timeout DURATION
                                    idle time before a connection closes, default 10s
                                    [KEYAUTH_SERVER_CONNECTION_TIMEOUT]
          --signing-key-bits N      size of the RSA signing key made on first start (and by keys
                                    rotate), 2048 (default), 3072 or 4096
                                    [KEYAUTH_SERVER_SIGNING_KEY_BITS]
          --token-alg RS256|ES256|EdDSA
                                    algorithm of the signing key made on first start, default
                                    RS256 (every JWT library has it); ES256 signs far faster; also
                                    the default of 'keys rotate' [KEYAUTH_SERVER_TOKEN_ALG]
          --replay-cache memory|database
                                    where accepted assertions are remembered: memory (default
                                    with SQLite; one server per file, saved at a clean stop, and
                                    after a crash assertions issued before the restart + 10 s
                                    are refused) or database (every login waits for an fsync;
                                    the only choice with PostgreSQL) [KEYAUTH_SERVER_REPLAY_CACHE]
          --signing-key-file PATH   sign with this unencrypted PEM key (RSA of 2048 to 4096 bits,
                                    EC P-256 or Ed25519; mode 600, owned by the server's user)
                                    instead of keys kept in the database; it is then the only key
                                    published and accepted, and it does not rotate
                                    [KEYAUTH_SERVER_SIGNING_KEY_FILE]
          --ssh-ca-key-file PATH    be an SSH user certificate authority with this key (made by
                                    ssh-ca init): POST /v1/ssh/certificates certifies a device's
                                    own key for its user [KEYAUTH_SERVER_SSH_CA_KEY_FILE]
          --ssh-principals-file PATH
                                    principals of SSH certificates besides the user's name, per
                                    user and per group (user NAME: P..., group G: P..., members
                                    G: USER...) [KEYAUTH_SERVER_SSH_PRINCIPALS_FILE]
          --ssh-certificate-lifetime DURATION
                                    how long an SSH certificate is valid, default 8h, at most 7d
                                    [KEYAUTH_SERVER_SSH_CERTIFICATE_LIFETIME]
          --ssh-no-port-forwarding  certificates without permit-port-forwarding
                                    [KEYAUTH_SERVER_SSH_NO_PORT_FORWARDING=1]
          --sign-in-lifetime DURATION
                                    how long a sign-in request (a push login) waits for an
                                    answer, default 5m, 10s to 1h [KEYAUTH_SERVER_SIGN_IN_LIFETIME]
          --quiet                   no per-request log lines [KEYAUTH_SERVER_QUIET=1]
          --log-format text|json    log lines as text (default) or as JSON objects, one a line;
                                    a request's line has the client address (after
                                    --trust-proxy), method, path, route, status, duration, and the
                                    OAuth error code, user and device key ID when known
                                    [KEYAUTH_SERVER_LOG_FORMAT]
        """
}
