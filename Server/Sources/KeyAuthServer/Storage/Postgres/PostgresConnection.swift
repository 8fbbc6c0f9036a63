internal import CKeyAuthPQ
import Glibc
import KeyAuth

/// How a value travels as a statement parameter: in libpq's text format with an explicit type,
/// so that the server never has to infer one (a parameter used twice, as in
/// `CASE WHEN $1 = ...`, would be ambiguous).
extension SQLValue {
    // Type OIDs from PostgreSQL's catalog (`pg_type_d.h`, a server header libpq does not ship).
    fileprivate static let int8OID: Oid = 20
    fileprivate static let textOID: Oid = 25
    fileprivate static let byteaOID: Oid = 17

    /// The parameter type; 0 lets the server decide, which only NULL needs.
    fileprivate var typeOID: Oid {
        switch self {
        case .null: 0
        case .integer: Self.int8OID
        case .text: Self.textOID
        case .blob: Self.byteaOID
        }
    }

    /// The text-format encoding libpq sends, without the terminating NUL; nil for NULL.
    ///
    /// - Throws: `.queryFailed` for text holding a NUL character: PostgreSQL cannot store one,
    ///   and a C string would silently cut the value short there, so that `"a\0b"` would match
    ///   the row of `"a"`.
    fileprivate func textFormat() throws(StorageError) -> [UInt8]? {
        switch self {
        case .null:
            return nil
        case .integer(let number):
            return Array(String(number).utf8)
        case .text(let text):
            let bytes = Array(text.utf8)
            guard !bytes.contains(0) else {
                throw StorageError(.queryFailed, "a text value holds a NUL character, which PostgreSQL cannot store")
            }
            return bytes
        case .blob(let bytes):
            // bytea's hex input format: `\x` then two lower-case digits per byte.
            let digits = Array("0123456789abcdef".utf8)
            var encoded: [UInt8] = [UInt8(ascii: "\\"), UInt8(ascii: "x")]
            encoded.reserveCapacity(2 + bytes.count * 2)
            for byte in bytes {
                encoded.append(digits[Int(byte >> 4)])
                encoded.append(digits[Int(byte & 0x0f)])
            }
            return encoded
        }
    }
}

/// The PostgreSQL driver: the one owner of a libpq `PGconn`, used by one thread at a time (the
/// pool's slot lock).
///
/// Only parameterised statements reach the server (`PQsendQueryParams`): request data is never
/// spliced into SQL text. Results come in binary format, decoded by column type into
/// ``SQLValue``s, so that reading needs no text parsing and does not depend on server settings
/// such as `bytea_output`. A broken connection is repaired in place with `PQreset`, which keeps
/// the connection parameters, so the pool never has to keep the URL around in another copy.
final class PostgresConnection: SQLConnection {
    /// How long a statement may go unanswered before its connection is closed: the server's own
    /// `statement_timeout` (30 s, ``PostgresLocation/connectionParameters``) and 10 s more.
    static let defaultStatementDeadlineSeconds = 40

    private let handle: OpaquePointer
    private let location: PostgresLocation
    /// See ``defaultStatementDeadlineSeconds``.
    private let statementDeadlineNanoseconds: UInt64
    /// Whether ``withoutStatementDeadline(_:)`` is running: statements then wait for their
    /// answer as long as the server works on them. TCP keepalives and `tcp_user_timeout` still
    /// break the connection to a host that is gone.
    private var statementDeadlineLifted = false
    /// Whether a statement was refused as a write on a read-only server (SQLSTATE 25006): a
    /// standby, or a primary demoted since the connection opened. The pool then reconnects,
    /// and `target_session_attrs=read-write` finds the primary; kept, the connection failed
    /// every write until the server restarted.
    private(set) var foundServerReadOnly = false

    var dialect: SQLDialect { .postgres }

    /// Connects with `location`'s parameters, blocking for at most the connect timeout.
    ///
    /// A failed attempt still yields a connection object, in state ``isOpen`` false, so that
    /// the pool can retry it later with ``reset()``.
    /// - Throws: `.unavailable` only when libpq cannot even allocate a connection.
    init(
        _ location: PostgresLocation, statementDeadlineSeconds: Int = defaultStatementDeadlineSeconds
    ) throws(StorageError) {
        let parameters = location.connectionParameters
        let handle = Self.withCStrings(parameters.map { Array($0.keyword.utf8) }) { keywords in
            Self.withCStrings(parameters.map { Array($0.value.utf8) }) { values in
                PQconnectdbParams(keywords, values, 1)
            }
        }
        guard let handle else {
            throw StorageError(.unavailable, "libpq cannot allocate a connection to \(location)")
        }
        self.handle = handle
        self.location = location
        statementDeadlineNanoseconds = UInt64(max(statementDeadlineSeconds, 1)) * 1_000_000_000
        // libpq prints notices to stderr by default, including the FATAL message a server sends
        // to idle connections when it shuts down. Storage reports trouble through its errors;
        // stray lines on the server's stderr would only confuse its log.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
    }

    deinit {
        PQfinish(handle)
    }

    /// Whether the connection is established and has not been seen to break.
    var isOpen: Bool { PQstatus(handle) == CONNECTION_OK }

    /// Whether the connection is open and outside any transaction, as a pooled one must be.
    var isIdle: Bool { isOpen && PQtransactionStatus(handle) == PQTRANS_IDLE }

    /// Whether a transaction is open, failed statements included (it then awaits a rollback).
    var isInTransaction: Bool {
        let status = PQtransactionStatus(handle)
        return status == PQTRANS_INTRANS || status == PQTRANS_INERROR
    }

    /// Whether the connection is still usable, reading without blocking whatever the server
    /// sent while it sat in the pool.
    ///
    /// libpq only notices that the server went away when it next reads. A server that shut
    /// down or restarted has sent a FATAL message and closed the socket; reading both now
    /// lets the pool reconnect *before* it sends a write, instead of losing that write to a
    /// connection that was already dead. Two reads: the first may return only the message.
    func checkOpen() -> Bool {
        if PQconsumeInput(handle) == 1 {
            PQconsumeInput(handle)
        }
        return isOpen
    }

    /// Closes and reopens the connection with the same parameters; true when it is open again.
    @discardableResult
    func reset() -> Bool {
        foundServerReadOnly = false
        PQreset(handle)
        return isOpen
    }

    /// libpq's last error for this connection, password masked.
    var nativeError: NativeError {
        NativeError(
            library: "libpq", code: Int(PQstatus(handle).rawValue),
            text: location.redact(Self.trimmed(String(cString: PQerrorMessage(handle)))))
    }

    /// Runs one parameterised statement and reads all its rows.
    ///
    /// The statement is sent, and its answer awaited for at most the statement deadline: a
    /// server process that stops answering while its host's network stack still does (stopped,
    /// or stuck on a dead disk) passes every TCP keepalive, and a blocking `PQexecParams` would
    /// hold the request, and the pooled connection, until it resumed.
    ///
    /// - Throws: `.unavailable` when the connection is broken, the server refuses service
    ///   (SQLSTATE classes 08, 53 and 57P, and 25006, a write on a read-only server) or does not answer by the deadline (the connection is
    ///   then closed, so that the pool reconnects), `.queryFailed` for any other failure,
    ///   carrying the SQLSTATE and the primary message (never the detail, which may quote row
    ///   values).
    @discardableResult
    func execute(_ sql: String, _ bindings: [SQLValue]) throws(StorageError) -> SQLResult {
        var encoded: [[UInt8]?] = []
        encoded.reserveCapacity(bindings.count)
        // The encodings may hold a private key in hex: wipe them, as the C copies are.
        defer {
            for index in encoded.indices {
                if var bytes = encoded[index] {
                    encoded[index] = nil
                    CryptoPrimitives.wipe(&bytes)
                }
            }
        }
        for binding in bindings {
            encoded.append(try binding.textFormat())
        }
        let types = bindings.map(\.typeOID)
        let sent = Self.withCStrings(encoded) { values in
            types.withUnsafeBufferPointer { types in
                PQsendQueryParams(
                    handle, sql, Int32(bindings.count), types.baseAddress, values, nil, nil, Self.binaryFormat)
            }
        }
        guard sent == 1 else {
            throw StorageError(
                isOpen ? .queryFailed : .unavailable, "PostgreSQL did not take a statement", underlying: nativeError)
        }
        guard let pointer = try awaitResult() else {
            throw StorageError(
                isOpen ? .queryFailed : .unavailable, "PostgreSQL did not answer a statement", underlying: nativeError)
        }
        let result = PostgresResult(taking: pointer)
        let status = PQresultStatus(pointer)
        guard status != PGRES_COMMAND_OK, status != PGRES_TUPLES_OK else {
            return SQLResult(rows: result.rows(), affectedRowCount: result.affectedRowCount)
        }
        let state = result.errorField(Self.sqlStateField) ?? ""
        let text = result.errorField(Self.primaryMessageField) ?? Self.trimmed(String(cString: PQerrorMessage(handle)))
        if state == Self.readOnlyTransactionState { foundServerReadOnly = true }
        let refused =
            state.hasPrefix("08") || state.hasPrefix("53") || state.hasPrefix("57P")
            || state == Self.readOnlyTransactionState
        throw StorageError(
            !isOpen || refused ? .unavailable : .queryFailed, "a PostgreSQL statement failed",
            underlying: NativeError(
                library: "libpq", code: Int(status.rawValue),
                text: location.redact(state.isEmpty ? text : "SQLSTATE \(state): \(text)")))
    }

    func withoutStatementDeadline<Result>(_ body: () throws(StorageError) -> Result) throws(StorageError) -> Result {
        let wasLifted = statementDeadlineLifted
        statementDeadlineLifted = true
        defer { statementDeadlineLifted = wasLifted }
        return try body()
    }

    /// The statement's result, as `PQexecParams` would return it (the last of its results), or
    /// nil when the connection broke; waits on the socket for at most the statement deadline.
    ///
    /// - Throws: `.unavailable` at the deadline, after closing the connection's socket: the
    ///   statement's fate is unknown and the connection cannot be used again without a reset.
    private func awaitResult() throws(StorageError) -> OpaquePointer? {
        let deadline = ServerClock.monotonicNanoseconds() &+ statementDeadlineNanoseconds
        var last: OpaquePointer?
        while true {
            while PQisBusy(handle) == 0 {
                guard let result = PQgetResult(handle) else { return last }
                if let previous = last { PQclear(previous) }
                last = result
            }
            let remaining = ServerClock.nanoseconds(from: ServerClock.monotonicNanoseconds(), to: deadline)
            var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
            let ready =
                statementDeadlineLifted
                ? poll(&descriptor, 1, -1)
                : remaining == 0 ? 0 : poll(&descriptor, 1, Int32(clamping: (remaining + 999_999) / 1_000_000))
            if ready < 0, errno == EINTR { continue }
            if ready <= 0 {
                if let last { PQclear(last) }
                abandonStatement()
                guard ready == 0 else { return nil }
                throw StorageError(
                    .unavailable,
                    "PostgreSQL did not answer a statement within \(statementDeadlineNanoseconds / 1_000_000_000) s; "
                        + "its connection was closed")
            }
            guard PQconsumeInput(handle) == 1 else {
                if let last { PQclear(last) }
                return nil
            }
        }
    }

    /// Closes the socket of a statement whose answer will not be read: libpq reads the end of
    /// the stream and marks the connection bad, so that the pool reconnects before using it
    /// again. The server process, if it resumes, finds its client gone and ends the statement.
    private func abandonStatement() {
        let socket = PQsocket(handle)
        if socket >= 0 { shutdown(socket, Int32(SHUT_RDWR)) }
        PQconsumeInput(handle)
    }

    /// SQLSTATE `read_only_sql_transaction`: a write on a server that takes none.
    static let readOnlyTransactionState = "25006"

    /// `resultFormat` 1: every result column in binary.
    private static let binaryFormat: Int32 = 1

    // PG_DIAG_SQLSTATE and PG_DIAG_MESSAGE_PRIMARY are character-literal macros ('C', 'M'),
    // which Swift does not import.
    private static let sqlStateField = Int32(UInt8(ascii: "C"))
    private static let primaryMessageField = Int32(UInt8(ascii: "M"))

    private static func trimmed(_ text: String) -> String {
        String(text.reversed().drop { $0.isWhitespace }.reversed())
            .split(separator: "\n").map { $0.trimmingPrefix(while: \.isWhitespace) }.joined(separator: " ")
    }

    /// Copies `strings` into NUL-terminated C strings (nil stays a NULL pointer) that live only
    /// during `body`, then wipes them: they hold the password and private keys in hex.
    private static func withCStrings<Result>(
        _ strings: [[UInt8]?], _ body: (UnsafePointer<UnsafePointer<CChar>?>?) -> Result
    ) -> Result {
        let buffers: [UnsafeMutableBufferPointer<CChar>?] = strings.map { bytes in
            bytes.map { bytes in
                let buffer = UnsafeMutableBufferPointer<CChar>.allocate(capacity: bytes.count + 1)
                for (index, byte) in bytes.enumerated() {
                    buffer[index] = CChar(bitPattern: byte)
                }
                buffer[bytes.count] = 0
                return buffer
            }
        }
        defer {
            for case let buffer? in buffers {
                buffer.update(repeating: 0)
                buffer.deallocate()
            }
        }
        // A terminating NULL, as PQconnectdbParams expects of its keyword and value arrays.
        let pointers: [UnsafePointer<CChar>?] =
            buffers.map { buffer in buffer?.baseAddress.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress) }
    }
}

@available(*, unavailable)
extension PostgresConnection: Sendable {}
