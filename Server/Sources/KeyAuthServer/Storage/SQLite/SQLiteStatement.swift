internal import CKeyAuthSQLite
import KeyAuth

/// The one owner of a prepared `sqlite3_stmt`; values are only ever bound, never spliced into
/// SQL text.
final class SQLiteStatement {
    private let pointer: OpaquePointer
    private let connection: OpaquePointer
    /// For each SQLite parameter (1, 2, ...), the index of its value in the bindings.
    ///
    /// The storage writes `$1`, `$2`, ... as PostgreSQL does. SQLite reads `$1` as a parameter
    /// *named* "$1" and numbers parameters in order of first appearance, so `$2 ... $1` would
    /// swap values if bound by position; binding by name keeps one SQL text for both.
    private let valueIndexes: [Int]

    init(taking pointer: OpaquePointer, connection: OpaquePointer) {
        self.pointer = pointer
        self.connection = connection
        var valueIndexes: [Int] = []
        let count = sqlite3_bind_parameter_count(pointer)
        if count > 0 {
            for parameter in 1...count {
                // `$n` (or `?n`) names value n; a nameless `?` takes the value at its position.
                let name = sqlite3_bind_parameter_name(pointer, parameter).map { String(cString: $0) }
                let number = name.flatMap { Int($0.dropFirst()) } ?? Int(parameter)
                valueIndexes.append(number - 1)
            }
        }
        self.valueIndexes = valueIndexes
    }

    deinit {
        sqlite3_finalize(pointer)
    }

    /// Binds `values` to `$1`, `$2`, ... Text and blobs are copied by SQLite
    /// (`SQLITE_TRANSIENT`), so no Swift pointer outlives the call.
    ///
    /// - Throws: `.queryFailed` when the statement needs a value that `values` lacks.
    func bind(_ values: [SQLValue]) throws(StorageError) {
        sqlite3_clear_bindings(pointer)
        for (offset, valueIndex) in valueIndexes.enumerated() {
            guard values.indices.contains(valueIndex) else {
                throw StorageError(
                    .queryFailed, "a SQLite statement needs parameter \(valueIndex + 1) of \(values.count)")
            }
            let index = Int32(offset + 1)
            let result: Int32
            switch values[valueIndex] {
            case .null:
                result = sqlite3_bind_null(pointer, index)
            case .integer(let number):
                result = sqlite3_bind_int64(pointer, index, number)
            case .text(let text):
                // With its byte count, not as a C string: a NUL inside would end the value there,
                // and `kid\0anything` would be looked up as `kid`.
                var utf8Text = text
                result = utf8Text.withUTF8 { buffer in
                    // A null pointer would bind NULL, not the empty text.
                    guard let start = buffer.baseAddress, !buffer.isEmpty else {
                        return sqlite3_bind_text(pointer, index, "", 0, ckeyauth_sqlite_transient())
                    }
                    guard let length = Int32(exactly: buffer.count) else { return SQLITE_TOOBIG }
                    return start.withMemoryRebound(to: CChar.self, capacity: buffer.count) {
                        sqlite3_bind_text(pointer, index, $0, length, ckeyauth_sqlite_transient())
                    }
                }
            case .blob(let bytes):
                if bytes.isEmpty {
                    result = sqlite3_bind_zeroblob(pointer, index, 0)
                } else {
                    result = bytes.withUnsafeBytes {
                        sqlite3_bind_blob(pointer, index, $0.baseAddress, Int32($0.count), ckeyauth_sqlite_transient())
                    }
                }
            }
            guard result == SQLITE_OK else {
                throw StorageError(
                    .queryFailed, "cannot bind a SQLite parameter",
                    underlying: SQLiteConnection.native(result, connection))
            }
        }
    }

    /// Advances; true while there is a row to read.
    func step() throws(StorageError) -> Bool {
        let result = sqlite3_step(pointer)
        switch result {
        case SQLITE_ROW: return true
        case SQLITE_DONE: return false
        default:
            throw StorageError(
                .queryFailed, "a SQLite statement failed", underlying: SQLiteConnection.native(result, connection))
        }
    }

    /// Makes the statement reusable and releases its read snapshot.
    func reset() {
        sqlite3_reset(pointer)
    }

    /// The current row, each column as the type SQLite stored it in. There are no floating
    /// point columns; one would read as an integer.
    func row() -> SQLRow {
        SQLRow(values: (0..<sqlite3_column_count(pointer)).map(value))
    }

    private func value(_ column: Int32) -> SQLValue {
        switch sqlite3_column_type(pointer, column) {
        case SQLITE_NULL:
            return .null
        case SQLITE_TEXT:
            guard let bytes = sqlite3_column_text(pointer, column) else { return .text("") }
            let count = Int(sqlite3_column_bytes(pointer, column))
            return .text(String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self))
        case SQLITE_BLOB:
            let count = Int(sqlite3_column_bytes(pointer, column))
            guard count > 0, let bytes = sqlite3_column_blob(pointer, column) else { return .blob([]) }
            return .blob(Array(UnsafeRawBufferPointer(start: bytes, count: count)))
        default:
            return .integer(sqlite3_column_int64(pointer, column))
        }
    }
}

@available(*, unavailable)
extension SQLiteStatement: Sendable {}
