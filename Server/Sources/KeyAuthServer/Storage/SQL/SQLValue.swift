/// A value bound to a statement parameter or read from a result column, the same for every
/// driver: the storage speaks only these four types, so that its SQL and its row mapping are
/// written once.
///
/// Times and counts are 64-bit integers (seconds since 1970, as in JWT claims); key material
/// and code hashes are byte strings; everything else is UTF-8 text.
enum SQLValue: Sendable, Hashable {
    case null
    case integer(Int64)
    case text(String)
    case blob([UInt8])
}

/// One statement with its parameters, for statements the dialect contributes (locks).
struct SQLStatement: Sendable, Hashable {
    /// SQL with numbered placeholders `$1`, `$2`, ... as both drivers read them.
    let sql: String
    let bindings: [SQLValue]

    init(_ sql: String, _ bindings: [SQLValue] = []) {
        self.sql = sql
        self.bindings = bindings
    }
}

/// One result row, read by column index.
///
/// Accessors are strict: a column of another type reads as nil, so that a mapping notices a
/// schema that is not what it expects instead of reading a number as text.
struct SQLRow: Sendable, Hashable {
    let values: [SQLValue]

    /// Column `column` as an integer, or nil when NULL or not an integer.
    func integer(_ column: Int) -> Int64? {
        guard values.indices.contains(column), case .integer(let number) = values[column] else { return nil }
        return number
    }

    /// Column `column` as text, or nil when NULL or not text.
    func text(_ column: Int) -> String? {
        guard values.indices.contains(column), case .text(let text) = values[column] else { return nil }
        return text
    }

    /// Column `column` as bytes, or nil when NULL or not a byte string.
    ///
    /// Returns the row's own buffer (no copy), so that a caller who wipes a secret it read
    /// wipes the only copy once the row is gone.
    func blob(_ column: Int) -> [UInt8]? {
        guard values.indices.contains(column), case .blob(let bytes) = values[column] else { return nil }
        return bytes
    }
}

/// What a statement returned: its rows (none for a write) and how many rows it changed.
struct SQLResult: Sendable {
    let rows: [SQLRow]
    /// Rows an `INSERT`, `UPDATE` or `DELETE` changed; 0 for every other statement. The
    /// storage settles races on it ("did my conditional update win?"), never on a read first.
    let affectedRowCount: Int

    /// The first row, for statements that return one (a count, a version).
    var firstRow: SQLRow? { rows.first }
}

extension SQLValue {
    /// An optional integer column: NULL for nil.
    init(_ value: Int64?) {
        self = value.map(SQLValue.integer) ?? .null
    }

    /// An optional text column: NULL for nil.
    init(_ value: String?) {
        self = value.map(SQLValue.text) ?? .null
    }
}
