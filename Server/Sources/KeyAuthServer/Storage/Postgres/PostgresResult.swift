internal import CKeyAuthPQ

/// The one owner of a libpq `PGresult`, read in text format.
final class PostgresResult {
    private let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        PQclear(pointer)
    }

    /// How many rows a query returned.
    var rowCount: Int { Int(PQntuples(pointer)) }

    /// How many rows an `INSERT`, `UPDATE` or `DELETE` changed (0 for other statements).
    var affectedRows: Int { Int(String(cString: PQcmdTuples(pointer))) ?? 0 }

    /// Field `code` of the error (a `PG_DIAG_*` letter), or nil when absent.
    func errorField(_ code: Int32) -> String? {
        PQresultErrorField(pointer, code).map { String(cString: $0) }
    }

    /// Column `column` of row `row` as text, or nil when NULL.
    func text(_ row: Int, _ column: Int) -> String? {
        guard PQgetisnull(pointer, Int32(row), Int32(column)) == 0,
            let value = PQgetvalue(pointer, Int32(row), Int32(column))
        else { return nil }
        return String(cString: value)
    }

    /// Column `column` of row `row` as an integer, or nil when NULL.
    func integer(_ row: Int, _ column: Int) -> Int64? {
        text(row, column).flatMap { Int64($0) }
    }

    /// Column `column` of row `row`, selected as `encode(value, 'hex')`, as bytes (nil when
    /// NULL or not hex).
    ///
    /// Selecting hex rather than raw `bytea` keeps the result independent of the server's
    /// `bytea_output` setting. The hex text in the result is wiped once decoded, because the
    /// column may be a private key; libpq's own input buffer is beyond our reach.
    func hexBytes(_ row: Int, _ column: Int) -> [UInt8]? {
        guard PQgetisnull(pointer, Int32(row), Int32(column)) == 0,
            let value = PQgetvalue(pointer, Int32(row), Int32(column))
        else { return nil }
        let count = Int(PQgetlength(pointer, Int32(row), Int32(column)))
        let digits = UnsafeMutableBufferPointer(start: value, count: count)
        defer { digits.update(repeating: 0) }
        guard count.isMultiple(of: 2) else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count / 2)
        var index = 0
        while index < count {
            guard let high = Self.hexValue(digits[index]), let low = Self.hexValue(digits[index + 1]) else {
                return nil
            }
            bytes.append(high << 4 | low)
            index += 2
        }
        return bytes
    }

    private static func hexValue(_ digit: CChar) -> UInt8? {
        let digit = UInt8(bitPattern: digit)
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return digit - UInt8(ascii: "A") + 10
        default: return nil
        }
    }
}

@available(*, unavailable)
extension PostgresResult: Sendable {}
