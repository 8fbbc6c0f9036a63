import KeyAuth

/// A failure of the server's storage: the store is unreachable, busy, full or corrupt.
///
/// Never the client's fault, so the server answers 503 `temporarily_unavailable` (with
/// `Retry-After`) and logs the native detail, which never reaches the client.
package struct StorageError: Error, Sendable, CustomStringConvertible {
    /// A stable, machine-readable reason.
    package struct Code: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
        package let rawValue: String
        package init(rawValue: String) { self.rawValue = rawValue }
        package var description: String { rawValue }

        /// The store cannot be opened or reached.
        package static let unavailable = Code(rawValue: "unavailable")
        /// A statement failed (busy past the timeout, disk full, I/O error, corruption).
        package static let queryFailed = Code(rawValue: "query_failed")
        /// The store's schema is newer than this server understands.
        package static let schemaTooNew = Code(rawValue: "schema_too_new")
        /// The store's schema is older than this server's, and the caller (an admin command)
        /// may not migrate it: only `serve` does.
        package static let schemaTooOld = Code(rawValue: "schema_too_old")
        /// A database that keyauth never made (no `schema_migrations`), which an admin command
        /// must not turn into one.
        package static let notKeyAuthDatabase = Code(rawValue: "not_keyauth_database")
        /// A database without any table, which an admin command met: a `serve` starting on it
        /// has not committed its first migration yet (or none was started on it). Temporary,
        /// unlike ``notKeyAuthDatabase``: the message says to try again in a moment.
        package static let beingCreated = Code(rawValue: "being_created")
        /// The store was closed.
        package static let closed = Code(rawValue: "closed")
        /// The requested kind of storage is not available in this build.
        package static let unsupported = Code(rawValue: "unsupported")
        /// A database file other users can read or replace, or that belongs to another user:
        /// it holds the server's signing key, so the server refuses to use it.
        package static let unprotected = Code(rawValue: "unprotected")
        /// No database at the path an admin command was given (only `serve` creates one).
        package static let notFound = Code(rawValue: "not_found")
        /// A location that cannot be used as written: a PostgreSQL URL that libpq would read
        /// otherwise than meant (a password holding an unencoded `@`).
        package static let invalidLocation = Code(rawValue: "invalid_location")
    }

    /// Why, for programs.
    package let code: Code
    /// Why, for operators' logs. Never sent to clients.
    package let message: String
    /// The database's own code and text (sqlite result code, SQLSTATE).
    package let underlying: NativeError?

    /// Creates an error.
    package init(_ code: Code, _ message: String, underlying: NativeError? = nil) {
        self.code = code
        self.message = message
        self.underlying = underlying
    }

    package var description: String {
        guard let underlying else { return message }
        return "\(message) (\(underlying))"
    }
}
