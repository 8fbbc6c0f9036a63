/// `keyauth-server COMMAND --help` and `keyauth-server help COMMAND`: one page per command, its
/// usage line, what it does and its options, as `keyauth COMMAND --help` has. `--help` alone
/// keeps the whole text (``helpText``), from which the man page is made: every option a page
/// names is in it too (`ServerHelpTests` checks).
extension ServerCommand {
    /// The help page of `verb` (one of ``verbs``), or the whole text for any other word.
    static func helpPage(for verb: String) -> String {
        switch verb {
        case "serve":
            return """
                usage: keyauth-server [serve] [options]

                Runs the server until SIGTERM, SIGINT or SIGHUP, then finishes the requests in progress and
                exits 0. It creates the database when it is missing, and a signing key in it.

                options (environment variable in brackets; each is also a key of the settings file):
                \(serveOptions)
                  -h, --help                this text

                """
        case "check-config":
            return """
                usage: keyauth-server check-config [options]

                Validates the options, variables and settings file as serve would, and prints every
                setting's effective value and where it came from (a password in a postgres:// URL
                masked). It opens no database and binds no port. It takes serve's options
                (keyauth-server serve --help).

                """
        case "enroll":
            return page(
                "enroll USER",
                """
                Prints a one-time enrollment code for USER, valid 15 minutes, alone on standard output
                (the message goes to standard error): the user's first device registers with it.
                """)
        case "devices":
            return page(
                "devices [--user USER] [--status STATUS] [--json]",
                """
                Lists devices in aligned columns (KID USER STATUS TIER CREATED LAST_LOGIN NAME), the
                status as clients see it.
                """,
                """
                  --user USER               only this user's devices
                  --status STATUS           only devices in this state: active, pending, expired,
                                            denied or revoked
                  --json                    one JSON array instead of columns
                """)
        case "approve":
            return page(
                "approve KID",
                """
                Approves a pending device of any user. KID is a key ID or a prefix of at least 8
                characters that names one device; a prefix several devices have is refused with the
                list of them.
                """)
        case "revoke":
            return page(
                "revoke KID",
                """
                Revokes an active device or denies a pending one. KID is a key ID or a prefix of at
                least 8 characters that names one device.
                """)
        case "users":
            return page(
                "users [--json]", "Lists users with their devices counted by state and their last login.",
                jsonOption)
        case "delete-user":
            return page(
                "delete-user USER",
                """
                Revokes every device of USER, then deletes the user's devices and enrollment codes.
                The SSH revocation list (GET /v1/ssh/krl, ssh-ca krl) keeps naming the deleted
                devices for 7 days and 5 minutes (the longest certificate lifetime and the clock
                allowance), so no certificate of theirs works again at a host that checks it.
                """)
        case "codes":
            return page(
                "codes list [--json] | revoke USER",
                """
                codes list shows the enrollment codes still usable, by a short ID of their hash;
                codes revoke USER deletes that user's unused codes.
                """, jsonOption)
        case "audit":
            return page(
                "audit [--since DURATION|TIME] [--json]",
                """
                Prints the administrative actions, oldest first, in aligned columns, the detail last
                and as stored.
                """,
                """
                  --since DURATION|TIME     only those since a duration ago (90s, 30m, 24h, 7d) or a
                                            UTC time (2026-12-01T08:00:00Z or 2026-12-01)
                \(jsonOption)
                """)
        case "backup":
            return page(
                "backup FILE",
                """
                Copies a SQLite database, even while serve runs, into the new FILE (mode 600: it holds
                the signing key) with SQLite's online backup API; for PostgreSQL use pg_dump.
                """)
        case "keys":
            return page(
                "keys [list] [--json]\n       keyauth-server keys rotate [--alg RS256|ES256|EdDSA] [--delay DURATION]"
                    + " [--signing-key-bits N]",
                """
                keys lists the signing keys (KID, ALG, STATE next|current|previous|id-tokens|retired,
                dates; id-tokens is a previous RS256 key that still signs ID tokens). keys rotate
                makes a new key that signs after --delay and prints its KID; the old key stays
                published until its last token expires, then the servers retire it. With
                --signing-key-file there is nothing to rotate.
                """,
                """
                \(jsonOption)
                  --alg RS256|ES256|EdDSA   the new key's algorithm, default KEYAUTH_SERVER_TOKEN_ALG,
                                            else the current key's
                  --delay DURATION          how long before the new key signs (90, 90s, 5m, 1h30m),
                                            default 10m, so that caches of the JWK set see it first
                  --signing-key-bits N      a new RSA key's size, 2048, 3072 or 4096, default the
                                            newest RSA key's [KEYAUTH_SERVER_SIGNING_KEY_BITS]
                  --token-lifetime DURATION the servers' access token lifetime, which decides when
                                            previous keys retire, default 15m
                                            [KEYAUTH_SERVER_TOKEN_LIFETIME]
                  --signing-key-file PATH   the servers' signing key file, if any
                                            [KEYAUTH_SERVER_SIGNING_KEY_FILE]
                """)
        case "ssh-ca":
            return page(
                """
                ssh-ca init [--alg ed25519|ecdsa|rsa] --ssh-ca-key-file PATH
                       keyauth-server ssh-ca show | retire --ssh-ca-key-file PATH
                       keyauth-server ssh-ca rotate [--alg ed25519|ecdsa|rsa] [--overlap DURATION] --ssh-ca-key-file PATH
                       keyauth-server ssh-ca krl FILE --ssh-ca-key-file PATH [--ssh-principals-file PATH]
                """,
                """
                ssh-ca init makes the key of the SSH user certificate authority (a new 0600 file; an
                existing one is never replaced) and prints its public key line. ssh-ca show prints
                the lines hosts trust with TrustedUserCAKeys; serve with the same --ssh-ca-key-file
                issues certificates at POST /v1/ssh/certificates. ssh-ca rotate puts a new key in
                the file and keeps the old CA's public key in PATH.previous, published beside the
                new one (GET /v1/ssh/ca, show, the revocation list) for the overlap or until
                ssh-ca retire; running servers follow at their next cleanup. A CA no longer
                published (after the overlap, retired, or replaced) is revoked in the revocation
                list; retire and a later rotate keep it in PATH.retired. ssh-ca krl writes the revocation list of revoked
                devices' certificates and retired CAs to FILE, for sshd's RevokedKeys (a server also
                serves it at GET /v1/ssh/krl); with the principals file, also of the certificates
                naming principals it no longer grants. It is the only action that reads --db.
                """,
                """
                  --alg ed25519|ecdsa|rsa   the CA key's type, default ed25519 (rotate: the current
                                            key's; ecdsa: P-256; rsa: 3072 bits)
                  --overlap DURATION        how long rotate keeps the old CA published, 0s to 30d,
                                            default 8d (the longest certificate lifetime and a day); rotate
                                            warns when it is shorter than the lifetime plus the
                                            cleanup interval
                  --ssh-certificate-lifetime DURATION
                                            rotate: the servers' certificate lifetime, default 8h
                                            [KEYAUTH_SERVER_SSH_CERTIFICATE_LIFETIME]
                  --cleanup-interval DURATION
                                            rotate: the servers' cleanup interval, default 1m
                                            [KEYAUTH_SERVER_CLEANUP_INTERVAL]
                  --ssh-ca-key-file PATH    the CA's private key file [KEYAUTH_SERVER_SSH_CA_KEY_FILE]
                  --ssh-principals-file PATH
                                            krl: the servers' principals file
                                            [KEYAUTH_SERVER_SSH_PRINCIPALS_FILE]
                """)
        case "clients":
            return page(
                """
                clients add NAME [--redirect-uri URI]... [--post-logout-redirect-uri URI]... [--public]
                       keyauth-server clients add HOST --kind host [--allow-user USER]...
                       keyauth-server clients list [--json] | remove ID
                """,
                """
                clients add prints the client_id and client_secret of a new client application for
                push sign-in (/bc-authorize), once. clients list and clients remove ID manage them.
                """,
                """
                  --redirect-uri URI        (repeatable) an OpenID Connect redirect URI of /authorize:
                                            https, or http to a loopback host
                  --post-logout-redirect-uri URI
                                            (repeatable) a redirect URI of /end-session
                  --public                  a native app with no secret that uses PKCE alone
                  --kind host               a Linux host of push login through pam_keyauth: its two
                                            printed lines are the host's /etc/keyauth/pam.conf
                  --allow-user USER         (repeatable, hosts only) a user who may log in to the
                                            host; without any, every user may
                \(jsonOption)
                """)
        default:
            return helpText
        }
    }

    /// The `--json` option of the listings.
    private static let jsonOption = "  --json                    one JSON array of objects instead of columns"

    /// An admin command's page: the usage line, the description, the command's own options and
    /// those every admin command takes.
    private static func page(_ usage: String, _ description: String, _ options: String = "") -> String {
        """
        usage: keyauth-server \(usage) [--db PATH] [--config FILE]

        \(description)

        options:
        \(options.isEmpty ? "" : options + "\n")  --db PATH|postgres://...  the database, default keyauth-server.db [KEYAUTH_SERVER_DB,
                                    or db in the settings file]; never created by this command
          --config FILE             the settings file to read db from [KEYAUTH_SERVER_CONFIG]
          -h, --help                this text

        """
    }
}
