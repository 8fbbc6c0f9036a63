import KeyAuth
import Testing

@testable import KeyAuthServer

extension TestAPI {
    /// Runs `sql` on the server's SQLite database as one write, the way a test sets a trap (a
    /// trigger that refuses a row, as a full disk would) or removes it.
    func executeSQL(_ sql: String) throws {
        let storage = try #require(storage as? SQLStorage)
        try storage.database.write { connection throws(StorageError) in _ = try connection.execute(sql, []) }
    }
}
