/// The storage schema as one list of numbered migrations for every backend, applied in order
/// at start inside one transaction; dialect differences are fragments from ``SQLDialect``.
///
/// Each applied version is recorded in `schema_migrations`. A migration is never edited after
/// release, only followed by a new one, so that every database, new or upgraded, SQLite or
/// PostgreSQL, reaches the same logical schema.
///
/// Several servers may start at once against one database, so migrating first takes the
/// migration lock (an advisory lock in PostgreSQL; SQLite's write transaction): the second
/// server waits, then finds the schema current and changes nothing. The lock ends with the
/// transaction, and with the connection when a server dies, so a crashed migration never
/// leaves it held.
enum SQLSchema {
    /// One step of the schema: migration `n` brings it from version `n - 1` to `n`.
    struct Migration: Sendable {
        let version: Int64
        /// The statements, with the dialect's fragments filled in.
        let statements: @Sendable (SQLDialect) -> [String]
    }

    static let migrations: [Migration] = [
        Migration(version: 1) { sql in
            [
                """
                CREATE TABLE devices (
                    kid \(sql.orderedText) PRIMARY KEY NOT NULL,
                    \(sql.originalUserColumn) \(sql.orderedText) NOT NULL,
                    name TEXT NOT NULL,
                    public_key_pem TEXT NOT NULL,
                    status TEXT NOT NULL CHECK (status IN ('pending', 'active', 'denied', 'revoked')),
                    created_at \(sql.integer) NOT NULL,
                    approved_at \(sql.integer),
                    revoked_at \(sql.integer),
                    last_login_at \(sql.integer)
                )
                """,
                "CREATE INDEX devices_by_user ON devices (\(sql.originalUserColumn), created_at)",
                """
                CREATE TABLE used_jtis (
                    key_id TEXT NOT NULL,
                    jti TEXT NOT NULL,
                    expires_at \(sql.integer) NOT NULL,
                    PRIMARY KEY (key_id, jti)
                )\(sql.keyOnlyTable)
                """,
                "CREATE INDEX used_jtis_by_expiry ON used_jtis (expires_at)",
                """
                CREATE TABLE enrollment_codes (
                    code_hash \(sql.bytes) PRIMARY KEY NOT NULL,
                    \(sql.originalUserColumn) TEXT NOT NULL,
                    expires_at \(sql.integer) NOT NULL,
                    used_at \(sql.integer)
                )
                """,
                """
                CREATE TABLE signing_keys (
                    kid \(sql.orderedText) PRIMARY KEY NOT NULL,
                    private_pem \(sql.bytes) NOT NULL,
                    created_at \(sql.integer) NOT NULL
                )
                """,
            ]
        },
        Migration(version: 2) { _ in
            [
                // Where a registration came from, shown to whoever approves it; NULL for
                // devices registered before this version.
                "ALTER TABLE devices ADD COLUMN registered_from TEXT",
                // The periodic purge of expired pending and old denied devices looks them up by
                // state, without scanning the active and revoked ones that make up the table.
                "CREATE INDEX devices_by_status ON devices (status, created_at)",
            ]
        },
        Migration(version: 3) { sql in
            // One name for the user column everywhere, so that every query is written once.
            // SQLite renames it in place and keeps its index; PostgreSQL has it already.
            guard sql.originalUserColumn != "user_name" else { return [] }
            return ["devices", "enrollment_codes"].map { table in
                "ALTER TABLE \(table) RENAME COLUMN \(sql.originalUserColumn) TO user_name"
            }
        },
        Migration(version: 4) { sql in
            [
                // Signing keys of any of the three algorithms, and their rotation dates: a key
                // signs from `active_from` until a newer key's passes, and is published until
                // `retired_at` (PROTOCOL.md section 3, "Key rotation"). Keys stored before this
                // version are RS256 and signed from their creation.
                "ALTER TABLE signing_keys ADD COLUMN algorithm TEXT NOT NULL DEFAULT 'RS256'",
                "ALTER TABLE signing_keys ADD COLUMN active_from \(sql.integer)",
                "ALTER TABLE signing_keys ADD COLUMN retired_at \(sql.integer)",
                "UPDATE signing_keys SET active_from = created_at",
            ]
        },
        Migration(version: 5) { sql in
            [
                // Client applications of sign-in by approval; the secret only as its SHA-256.
                """
                CREATE TABLE clients (
                    client_id \(sql.orderedText) PRIMARY KEY NOT NULL,
                    name TEXT NOT NULL,
                    secret_hash \(sql.bytes) NOT NULL,
                    created_at \(sql.integer) NOT NULL
                )
                """,
                // Sign-in requests of every origin (a client's CIBA request, the account page);
                // methods are the answering device's amr values, space-separated.
                """
                CREATE TABLE sign_in_requests (
                    id \(sql.orderedText) PRIMARY KEY NOT NULL,
                    kind TEXT NOT NULL,
                    client_id TEXT,
                    user_name \(sql.orderedText) NOT NULL,
                    binding_message TEXT NOT NULL,
                    scope TEXT,
                    requested_from TEXT,
                    status TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'issued')),
                    created_at \(sql.integer) NOT NULL,
                    expires_at \(sql.integer) NOT NULL,
                    poll_interval \(sql.integer) NOT NULL,
                    last_polled_at \(sql.integer),
                    answered_at \(sql.integer),
                    answering_kid TEXT,
                    methods TEXT NOT NULL
                )
                """,
                // A device's list of open requests, and the long poll that waits for a new one.
                "CREATE INDEX sign_in_requests_by_user ON sign_in_requests (user_name, created_at, id)",
                "CREATE INDEX sign_in_requests_by_expiry ON sign_in_requests (expires_at)",
                // The account page's sessions, keyed by the SHA-256 of the cookie's id.
                """
                CREATE TABLE browser_sessions (
                    id_hash \(sql.bytes) PRIMARY KEY NOT NULL,
                    csrf_token TEXT NOT NULL,
                    user_name TEXT NOT NULL,
                    sign_in_request_id TEXT,
                    binding_code TEXT NOT NULL,
                    approving_kid TEXT,
                    methods TEXT NOT NULL,
                    created_at \(sql.integer) NOT NULL,
                    expires_at \(sql.integer) NOT NULL,
                    signed_in_at \(sql.integer)
                )
                """,
                "CREATE INDEX browser_sessions_by_device ON browser_sessions (approving_kid)",
                "CREATE INDEX browser_sessions_by_expiry ON browser_sessions (expires_at)",
            ]
        },
        Migration(version: 6) { sql in
            [
                // Administrative actions (AuditTrail), in the order recorded: `id` orders the
                // events of one second.
                """
                CREATE TABLE audit_events (
                    id \(sql.serialPrimaryKey),
                    at \(sql.integer) NOT NULL,
                    action TEXT NOT NULL,
                    actor TEXT NOT NULL,
                    user_name TEXT,
                    subject TEXT,
                    detail TEXT
                )
                """,
                "CREATE INDEX audit_events_by_time ON audit_events (at)",
            ]
        },
        Migration(version: 7) { sql in
            [
                // OpenID Connect relying parties: where a browser may be sent back, space-separated
                // (a registered URI has no space), and whether the client is public (no secret).
                // CIBA clients registered before keep working with none.
                "ALTER TABLE clients ADD COLUMN redirect_uris TEXT NOT NULL DEFAULT ''",
                "ALTER TABLE clients ADD COLUMN post_logout_redirect_uris TEXT NOT NULL DEFAULT ''",
                "ALTER TABLE clients ADD COLUMN is_public \(sql.integer) NOT NULL DEFAULT 0",
                // An authorization request's redirect URI, whose host the device shows.
                "ALTER TABLE sign_in_requests ADD COLUMN redirect_uri TEXT",
                // Authorization requests waiting for the browser to sign in, by the hash of their
                // reference; bound to the browser by the hash of its CSRF cookie.
                """
                CREATE TABLE pending_authorizations (
                    id_hash \(sql.bytes) PRIMARY KEY NOT NULL,
                    browser_binding \(sql.bytes) NOT NULL,
                    client_id TEXT NOT NULL,
                    redirect_uri TEXT NOT NULL,
                    scope TEXT NOT NULL,
                    state TEXT,
                    nonce TEXT,
                    code_challenge TEXT NOT NULL,
                    login_hint TEXT,
                    expires_at \(sql.integer) NOT NULL
                )
                """,
                "CREATE INDEX pending_authorizations_by_expiry ON pending_authorizations (expires_at)",
                // Authorization codes by their hash; a redeemed one keeps its access token's jti so
                // that a second use revokes it.
                """
                CREATE TABLE authorization_codes (
                    code_hash \(sql.bytes) PRIMARY KEY NOT NULL,
                    client_id TEXT NOT NULL,
                    redirect_uri TEXT NOT NULL,
                    code_challenge TEXT NOT NULL,
                    nonce TEXT,
                    scope TEXT NOT NULL,
                    user_name TEXT NOT NULL,
                    approving_kid TEXT NOT NULL,
                    auth_time \(sql.integer) NOT NULL,
                    methods TEXT NOT NULL,
                    session_id TEXT NOT NULL,
                    expires_at \(sql.integer) NOT NULL,
                    redeemed_at \(sql.integer),
                    access_token_jti TEXT,
                    access_token_expires_at \(sql.integer)
                )
                """,
                "CREATE INDEX authorization_codes_by_expiry ON authorization_codes (expires_at)",
                """
                CREATE TABLE revoked_access_tokens (
                    jti \(sql.orderedText) PRIMARY KEY NOT NULL,
                    expires_at \(sql.integer) NOT NULL
                )
                """,
                "CREATE INDEX revoked_access_tokens_by_expiry ON revoked_access_tokens (expires_at)",
            ]
        },
        Migration(version: 8) { _ in
            [
                // Number matching: wrong codes typed on the approving device, counted so that the
                // third denies the request.
                "ALTER TABLE sign_in_requests ADD COLUMN code_attempts INTEGER NOT NULL DEFAULT 0",
                // What a request of kind `device` asks to approve: the pending device's key id.
                "ALTER TABLE sign_in_requests ADD COLUMN subject TEXT",
                // Authorization requests travel sealed in the page now: anyone could fill this
                // table with GET /authorize. A browser that was mid-sign-in starts again.
                "DROP TABLE pending_authorizations",
            ]
        },
        Migration(version: 9) { sql in
            [
                // `/healthz`'s write probe: one row per server host, rewritten in place at most
                // once a second, so that the probe proves the database takes a durable write
                // without growing it (SQLStorage+Health.swift).
                """
                CREATE TABLE health_probes (
                    instance \(sql.orderedText) PRIMARY KEY NOT NULL,
                    probed_at \(sql.integer) NOT NULL,
                    probes \(sql.integer) NOT NULL
                )
                """
            ]
        },
        Migration(version: 10) { sql in
            [
                // Recovery codes (RecoveryCodes): each a PBKDF2 hash under its own salt, with the
                // iteration count it was made with; `used_at` set once it enrolled a device.
                """
                CREATE TABLE recovery_codes (
                    id \(sql.serialPrimaryKey),
                    user_name \(sql.orderedText) NOT NULL,
                    salt \(sql.bytes) NOT NULL,
                    code_hash \(sql.bytes) NOT NULL,
                    iterations \(sql.integer) NOT NULL,
                    created_at \(sql.integer) NOT NULL,
                    used_at \(sql.integer)
                )
                """,
                "CREATE INDEX recovery_codes_by_user ON recovery_codes (user_name)",
            ]
        },
        Migration(version: 11) { _ in
            [
                // What the server knows of where each device key lives (PROTOCOL.md section 4,
                // "Register with TPM attestation"): `attested`, `tpm-unverified` or `software`.
                // Every device registered before this version was registered without attestation.
                "ALTER TABLE devices ADD COLUMN tier TEXT NOT NULL DEFAULT 'software'"
            ]
        },
        Migration(version: 12) { _ in
            [
                // Host clients (push login through pam_keyauth) and the users who may log in to
                // each, space-separated (a user name has no space); every client before was an
                // application.
                "ALTER TABLE clients ADD COLUMN kind TEXT NOT NULL DEFAULT 'application'",
                "ALTER TABLE clients ADD COLUMN allowed_users TEXT NOT NULL DEFAULT ''",
            ]
        },
        Migration(version: 13) { _ in
            [
                // The `acr_values` a sign-in request asked for (space-separated, keyauth's classes
                // only; NULL for none), which decide which devices' approvals complete it, and the
                // `acr` an authorization code's sign-in achieved (NULL for codes stored before).
                "ALTER TABLE sign_in_requests ADD COLUMN acr_values TEXT",
                "ALTER TABLE authorization_codes ADD COLUMN acr TEXT",
            ]
        },
        Migration(version: 14) { sql in
            [
                // Keys of devices that delete-user deleted, which the SSH revocation list keeps
                // naming until `listed_until` (deletion + the longest certificate lifetime + the
                // clock allowance): their certificates must not work again when the row goes.
                """
                CREATE TABLE ssh_revoked_keys (
                    kid \(sql.orderedText) PRIMARY KEY NOT NULL,
                    user_name TEXT NOT NULL,
                    public_key_pem TEXT NOT NULL,
                    listed_until \(sql.integer) NOT NULL
                )
                """,
                "CREATE INDEX ssh_revoked_keys_by_time ON ssh_revoked_keys (listed_until)",
            ]
        },
        Migration(version: 15) { _ in
            [
                // The account page's session that asked for a device approval or recovery codes:
                // the only one shown the code (NULL for requests of other kinds). Recovery-code
                // requests named their session in `subject` before, which now names devices only.
                "ALTER TABLE sign_in_requests ADD COLUMN requested_by TEXT",
                """
                UPDATE sign_in_requests SET requested_by = subject, subject = NULL
                WHERE kind = 'recovery-codes'
                """,
            ]
        },
        Migration(version: 16) { _ in
            [
                // How the key was protected when it was made ('pin' or 'none'), as the
                // registration stated it; NULL for devices registered before, and by clients
                // that do not say.
                "ALTER TABLE devices ADD COLUMN key_protection TEXT",
                // The same of the device that made a set of recovery codes, which a device
                // the codes enrol keeps no more than.
                "ALTER TABLE recovery_codes ADD COLUMN key_protection TEXT",
            ]
        },
        Migration(version: 17) { sql in
            [
                // Every SSH certificate issued, until it expires: the revocation list names the
                // serial of one whose principals the principals file no longer grants its user.
                // The serial is the certificate's 64 bits as a signed integer; the principals
                // are joined by newlines, which neither a principal nor a user name contains.
                """
                CREATE TABLE ssh_certificates (
                    serial \(sql.integer) PRIMARY KEY NOT NULL,
                    user_name TEXT NOT NULL,
                    kid TEXT NOT NULL,
                    principals TEXT NOT NULL,
                    valid_before \(sql.integer) NOT NULL
                )
                """,
                "CREATE INDEX ssh_certificates_by_time ON ssh_certificates (valid_before)",
            ]
        },
        Migration(version: 18) { _ in
            [
                // The client whose sign-in a browser session waits for or was approved for; NULL
                // for the account page's, which alone opens it.
                "ALTER TABLE browser_sessions ADD COLUMN signed_in_for TEXT",
                // Which kind a session signed in before this version was is not known: it keeps
                // serving applications, and the account page asks for a sign-in of its own.
                "UPDATE browser_sessions SET signed_in_for = '' WHERE signed_in_at IS NOT NULL",
            ]
        },
    ]
}
