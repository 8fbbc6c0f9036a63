internal import CKeyAuthPQ

/// The one owner of a libpq `PGresult` whose columns came in binary format.
final class PostgresResult {
    private let pointer: OpaquePointer

    init(taking pointer: OpaquePointer) {
        self.pointer = pointer
    }

    deinit {
        PQclear(pointer)
    }

    /// How many rows an `INSERT`, `UPDATE` or `DELETE` changed; 0 for other statements
    /// (libpq counts a `SELECT`'s rows here too, which ``SQLResult`` does not).
    var affectedRowCount: Int {
        guard !String(cString: PQcmdStatus(pointer)).hasPrefix("SELECT") else { return 0 }
        return Int(String(cString: PQcmdTuples(pointer))) ?? 0
    }

    /// Field `code` of the error (a `PG_DIAG_*` letter), or nil when absent.
    func errorField(_ code: Int32) -> String? {
        PQresultErrorField(pointer, code).map { String(cString: $0) }
    }

    /// Every row, each column decoded by its type.
    func rows() -> [SQLRow] {
        let columns = PQnfields(pointer)
        return (0..<PQntuples(pointer)).map { row in
            SQLRow(values: (0..<columns).map { column in value(row, column) })
        }
    }

    // Type OIDs from PostgreSQL's catalog (`pg_type_d.h`, a server header libpq does not ship).
    private static let boolOID: Oid = 16
    private static let byteaOID: Oid = 17
    private static let int8OID: Oid = 20
    private static let int2OID: Oid = 21
    private static let int4OID: Oid = 23
    private static let textOIDs: Set<Oid> = [19, 25, 705, 1042, 1043]  // name, text, unknown, char(n), varchar

    /// One column in binary format: integers big-endian, text as UTF-8, bytea as its bytes.
    /// Other types are returned as bytes (the storage reads none).
    ///
    /// bytea bytes in the result are wiped once copied, because the column may be a private
    /// key; libpq's own input buffer is beyond our reach.
    private func value(_ row: Int32, _ column: Int32) -> SQLValue {
        guard PQgetisnull(pointer, row, column) == 0, let value = PQgetvalue(pointer, row, column) else {
            return .null
        }
        let bytes = UnsafeMutableRawBufferPointer(
            start: UnsafeMutableRawPointer(value), count: Int(PQgetlength(pointer, row, column)))
        switch PQftype(pointer, column) {
        case Self.int8OID where bytes.count == 8, Self.int4OID where bytes.count == 4,
            Self.int2OID where bytes.count == 2, Self.boolOID where bytes.count == 1:
            // Two's complement, big-endian: sign-extend from the first byte.
            var number: Int64 = Int64(Int8(bitPattern: bytes[0]))
            for byte in bytes.dropFirst() {
                number = number << 8 | Int64(byte)
            }
            return .integer(number)
        case let type where Self.textOIDs.contains(type):
            return .text(String(decoding: bytes, as: UTF8.self))
        default:
            defer { _ = bytes.initializeMemory(as: UInt8.self, repeating: 0) }
            return .blob(Array(bytes))
        }
    }
}

@available(*, unavailable)
extension PostgresResult: Sendable {}
