internal import CKeyAuthSQLite

/// Whether the writer connection's open transaction has changed a device, and so has counted
/// itself in ``SQLiteDeviceChanges/started``; used by one thread at a time, like its connection.
final class SQLiteDeviceChangeMark {
    let changes: SQLiteDeviceChanges
    private(set) var isOpen = false

    init(_ changes: SQLiteDeviceChanges) {
        self.changes = changes
    }

    /// A trigger saw a device change: the first one of a transaction counts it as started.
    func noteChange() {
        guard !isOpen else { return }
        changes.noteChangeStarted()
        isOpen = true
    }

    /// The transaction ended (committed or rolled back): counts it as finished.
    func transactionEnded() {
        guard isOpen else { return }
        changes.noteChangeFinished()
        isOpen = false
    }
}

/// The SQL function that the device triggers call; its user data is the connection's mark.
private let devicesChangedFunction:
    @convention(c) (OpaquePointer?, Int32, UnsafeMutablePointer<OpaquePointer?>?) -> Void = { context, _, _ in
        guard let context, let mark = sqlite3_user_data(context) else { return }
        Unmanaged<SQLiteDeviceChangeMark>.fromOpaque(mark).takeUnretainedValue().noteChange()
        sqlite3_result_null(context)
    }

extension SQLiteConnection {
    /// The column that changes on every login and decides nothing (written in batches, see
    /// ``SQLStorage/recordLogin(kid:at:)``): its updates alone are not device changes.
    static let unwatchedDeviceColumn = "last_login_at"

    /// Makes every transaction of this connection that inserts, deletes or changes a device
    /// count itself in `changes`: the function here, the triggers once the table exists
    /// (``watchDevices()``).
    ///
    /// Triggers rather than explicit calls beside each statement, so that no statement that
    /// changes a device (an account's deletion, a migration's update, one written later) can
    /// be missed. Temporary ones, so that the file stays usable by `sqlite3` and other tools,
    /// which do not know the function.
    func reportDeviceChanges(to changes: SQLiteDeviceChanges) throws(StorageError) {
        let mark = SQLiteDeviceChangeMark(changes)
        let result = sqlite3_create_function_v2(
            handle, "keyauth_devices_changed", 0, SQLITE_UTF8, Unmanaged.passUnretained(mark).toOpaque(),
            devicesChangedFunction, nil, nil, nil)
        guard result == SQLITE_OK else {
            throw StorageError(
                .queryFailed, "cannot register the device-change function", underlying: Self.native(result, handle))
        }
        // The connection keeps the mark alive for as long as the function can run.
        deviceChangeMark = mark
    }

    /// Creates (again) the temporary triggers on `devices`, whose columns are read from the
    /// schema, so that a column added by a later migration is watched too. Without a `devices`
    /// table (a test's own schema) there is nothing to watch.
    func watchDevices() throws(StorageError) {
        let columns = try execute("SELECT name FROM pragma_table_info('devices')").rows.compactMap { $0.text(0) }
        let watched = columns.filter { $0 != Self.unwatchedDeviceColumn }
        guard !watched.isEmpty else { return }
        let updateOf = watched.map { "\"\($0)\"" }.joined(separator: ", ")
        for (name, event) in [("inserted", "INSERT"), ("deleted", "DELETE"), ("updated", "UPDATE OF \(updateOf)")] {
            try execute("DROP TRIGGER IF EXISTS temp.keyauth_device_\(name)")
            try execute(
                "CREATE TEMP TRIGGER keyauth_device_\(name) AFTER \(event) ON main.devices "
                    + "BEGIN SELECT keyauth_devices_changed(); END")
        }
    }

    /// After a statement: counts a device-changing transaction as finished once it has ended.
    func noteIfTransactionEnded() {
        guard let mark = deviceChangeMark, mark.isOpen, sqlite3_get_autocommit(handle) != 0 else { return }
        mark.transactionEnded()
    }
}
