internal import CKeyAuthSQLite
import KeyAuth

/// The one owner of a prepared `sqlite3_stmt`; values are only ever bound, never spliced into
/// SQL text.
final class SQLiteStatement {
    private let pointer: OpaquePointer
    private let connection: OpaquePointer

    init(taking pointer: OpaquePointer, connection: OpaquePointer) {
        self.pointer = pointer
        self.connection = connection
    }

    deinit {
        sqlite3_finalize(pointer)
    }

    /// Binds `values` to parameters 1, 2, ... Text and blobs are copied by SQLite
    /// (`SQLITE_TRANSIENT`), so no Swift pointer outlives the call.
    func bind(_ values: [SQLiteValue]) throws(StorageError) {
        sqlite3_clear_bindings(pointer)
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            let result: Int32
            switch value {
            case .null:
                result = sqlite3_bind_null(pointer, index)
            case .integer(let number):
                result = sqlite3_bind_int64(pointer, index, number)
            case .text(let text):
                result = text.withCString { sqlite3_bind_text(pointer, index, $0, -1, ckeyauth_sqlite_transient()) }
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

    /// Column `index` as an integer, or nil when NULL.
    func integer(_ index: Int32) -> Int64? {
        sqlite3_column_type(pointer, index) == SQLITE_NULL ? nil : sqlite3_column_int64(pointer, index)
    }

    /// Column `index` as text, or nil when NULL.
    func text(_ index: Int32) -> String? {
        guard sqlite3_column_type(pointer, index) != SQLITE_NULL, let bytes = sqlite3_column_text(pointer, index) else {
            return nil
        }
        let count = Int(sqlite3_column_bytes(pointer, index))
        return String(decoding: UnsafeBufferPointer(start: bytes, count: count), as: UTF8.self)
    }

    /// Column `index` as bytes (empty when NULL).
    func blob(_ index: Int32) -> [UInt8] {
        let count = Int(sqlite3_column_bytes(pointer, index))
        guard count > 0, let bytes = sqlite3_column_blob(pointer, index) else { return [] }
        return Array(UnsafeRawBufferPointer(start: bytes, count: count))
    }
}

@available(*, unavailable)
extension SQLiteStatement: Sendable {}
