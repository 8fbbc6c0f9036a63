extension ServerCommand {
    /// The help text of `keyauth-server --help`.
    public static let helpText = """
        usage: keyauth-server [serve] [options]
               keyauth-server enroll USER [--db PATH]
               keyauth-server devices [--db PATH]
               keyauth-server revoke KID [--db PATH]
               keyauth-server keys [list] [--db PATH]
               keyauth-server keys rotate [--alg RS256|ES256|EdDSA] [--delay SECONDS] [--db PATH]
               keyauth-server clients add NAME | list | remove ID [--db PATH]

        Device-key login server for keyauth (JWT bearer assertions, RFC 7523), with sign-in by
        approval on a device (OpenID CIBA) and an account page.

        keys lists the signing keys (KID, ALG, STATE next|current|previous|retired, dates). keys
        rotate makes a new key (--alg, default KEYAUTH_SERVER_TOKEN_ALG, else the current key's
        algorithm) that every server publishes at once and that signs after --delay seconds
        (default 600, so that caches of the JWK set see it first); it prints the new KID. The old
        key stays published until its last token expires (--token-lifetime, as the servers use),
        then the servers retire it. With --signing-key-file there is nothing to rotate.

        serve options (environment variable in brackets):
          --listen HOST:PORT        address to listen on, default 127.0.0.1:8088 [KEYAUTH_SERVER_LISTEN]
          --issuer URL              public base URL, iss and aud of tokens, default http://HOST:PORT
                                    [KEYAUTH_SERVER_ISSUER]
          --db PATH|postgres://...  storage, default keyauth-server.db in the current directory
                                    [KEYAUTH_SERVER_DB]; a SQLite file holds the signing key:
                                    it must be mode 600 and owned by the server's user
          --enrollment code|open    whether a new user's first device needs a code from 'enroll',
                                    default code; open is for development on loopback
                                    [KEYAUTH_SERVER_ENROLLMENT]
          --dpop optional|required  whether access tokens must be bound to the device key with a
                                    DPoP proof (RFC 9449); optional (default) still issues Bearer
                                    tokens to requests without a proof [KEYAUTH_SERVER_DPOP]
          --dpop-nonce              require DPoP proofs to carry a nonce from the server's
                                    DPoP-Nonce header [KEYAUTH_SERVER_DPOP_NONCE=1]
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
          --token-lifetime SECONDS  access token lifetime, default 900 [KEYAUTH_SERVER_TOKEN_LIFETIME]
          --threads N               HTTP worker threads, default one per core with SQLite, 32 with
                                    PostgreSQL [KEYAUTH_SERVER_THREADS]
          --cleanup-interval S      seconds between purges of expired entries, which also reload
                                    the signing keys and retire old ones, default 60
                                    [KEYAUTH_SERVER_CLEANUP_INTERVAL]
          --max-connections N       simultaneous connections, default 1000 [KEYAUTH_SERVER_MAX_CONNECTIONS]
          --max-connections-per-address N
                                    simultaneous connections from one IP address, 0 for no limit;
                                    default 32, or 0 with --trust-proxy (limit at the proxy)
                                    [KEYAUTH_SERVER_MAX_CONNECTIONS_PER_ADDRESS]
          --request-timeout S       seconds a connection has to send each whole request, from its
                                    start or the previous response, default 10
                                    [KEYAUTH_SERVER_REQUEST_TIMEOUT]
          --connection-timeout S    idle seconds before a connection closes, default 10
                                    [KEYAUTH_SERVER_CONNECTION_TIMEOUT]
          --signing-key-bits N      size of the signing key made on first start, 2048 (default),
                                    3072 or 4096 [KEYAUTH_SERVER_SIGNING_KEY_BITS]
          --token-alg RS256|ES256|EdDSA
                                    algorithm of the signing key made on first start, default
                                    RS256 (every JWT library has it); ES256 signs far faster; also
                                    the default of 'keys rotate' [KEYAUTH_SERVER_TOKEN_ALG]
          --signing-key-file PATH   sign with this unencrypted PEM key (RSA of 2048 to 4096 bits,
                                    EC P-256 or Ed25519; mode 600, owned by the server's user)
                                    instead of keys kept in the database; it is then the only key
                                    published and accepted, and it does not rotate
                                    [KEYAUTH_SERVER_SIGNING_KEY_FILE]
          --quiet                   no per-request log lines [KEYAUTH_SERVER_QUIET=1]
          -h, --help                this text
          -V, --version             print the version

        clients add NAME prints the client_id and client_secret of a new client application for
        push sign-in (/bc-authorize, CIBA poll mode), once; clients list and clients remove ID
        manage them. The account page is at /account.

        enroll, devices, revoke, keys and clients take --db (or KEYAUTH_SERVER_DB) too, and never
        create a database: only serve does.

        The server stops gracefully on SIGTERM or SIGINT. Exit status: 0 success, 64 usage error,
        65 a database or signing key file other users can read or that belongs to another user,
        or a signing key file that is missing or not a usable key, 69 storage or address
        unavailable (or no database for an admin command), 1 anything else.

        """
}
