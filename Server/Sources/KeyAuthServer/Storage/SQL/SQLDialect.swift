/// Where the SQL of SQLite and PostgreSQL differs, as data: the one place to look for a
/// difference between the backends.
///
/// Schema statements and the storage's queries are written once and take their few
/// backend-specific fragments from here; everything else (placeholders `$n`, `ON CONFLICT`,
/// row-value comparisons, `LIMIT`) both backends read the same.
struct SQLDialect: Sendable, Hashable {
    /// The backend's name, for messages.
    let name: String

    /// Column type of 64-bit integers (times, counts): PostgreSQL's `INTEGER` holds only 32 bits;
    /// SQLite's `INTEGER` holds 64, and only `INTEGER PRIMARY KEY` makes a column the row id.
    let integer: String

    /// Column type of byte strings (code hashes, private keys).
    let bytes: String

    /// Column type of text that lists are ordered by or compared with (kids, user names), so
    /// that both backends order by UTF-8 bytes: SQLite's default collation does; PostgreSQL
    /// needs `"C"`, since the database's default (often `en_US.UTF-8`) would list devices in
    /// another order.
    let orderedText: String

    /// Column definition of a primary key the database numbers in insertion order: SQLite's row
    /// id, a PostgreSQL identity column.
    let serialPrimaryKey: String

    /// Table option for a table that is only its primary key (the replay cache): SQLite then
    /// stores the rows in the key's B-tree instead of beside it. PostgreSQL has no such option.
    let keyOnlyTable: String

    /// The devices' and enrollment codes' user column in schema versions 1 and 2: `user` in
    /// SQLite; PostgreSQL reserves `user`, so its first schema said `user_name`, which
    /// migration 3 gives SQLite too.
    let originalUserColumn: String

    /// How a transaction begins. SQLite's `BEGIN` would take the write lock only at the first
    /// write, so a check before it could read what another writer is about to change;
    /// `IMMEDIATE` takes it at once.
    let beginTransaction: String

    /// The clause after a `SELECT` that locks the rows it reads until the transaction ends, so
    /// that a concurrent update of them waits and a waiting read sees the committed change
    /// (PostgreSQL's `FOR SHARE`); empty in SQLite, whose write transaction already excludes
    /// every other writer.
    let rowShareLock: String

    /// A query with a row when the table named `$1` exists (in the current schema), none when
    /// it does not: asked before reading a database that may not be keyauth's.
    let tableExists: String

    /// A query with a row when the database (its current schema) has any table at all: none in
    /// a database that `serve` is still creating, whose first migration has not committed.
    let anyTableExists: String

    /// The statements of transaction-scoped advisory locks, or nil where writers need none:
    /// every SQLite write transaction begins `IMMEDIATE` and holds the database's only write
    /// lock until it ends, which already serialises every check and insert.
    let advisoryLocks: SQLAdvisoryLockSyntax?

    /// The statements that take `lock` until the current transaction ends; none in a dialect
    /// without advisory locks.
    func statements(locking lock: SQLLock) -> [SQLStatement] {
        guard let syntax = advisoryLocks else { return [] }
        var statements: [SQLStatement] = []
        if let seconds = lock.timeoutSeconds {
            statements.append(SQLStatement(syntax.timeout, [.text("\(seconds)s")]))
        }
        switch lock.key {
        case .single(let key):
            statements.append(SQLStatement(syntax.single, [.integer(key)]))
        case .named(let space, let name):
            statements.append(SQLStatement(syntax.named, [.integer(Int64(space)), .text(name)]))
        }
        return statements
    }

    static let sqlite = SQLDialect(
        name: "SQLite", integer: "INTEGER", bytes: "BLOB", orderedText: "TEXT",
        serialPrimaryKey: "INTEGER PRIMARY KEY", keyOnlyTable: " WITHOUT ROWID",
        originalUserColumn: "user", beginTransaction: "BEGIN IMMEDIATE", rowShareLock: "",
        tableExists: "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = $1",
        anyTableExists: "SELECT 1 FROM sqlite_master WHERE type = 'table' LIMIT 1", advisoryLocks: nil)

    static let postgres = SQLDialect(
        name: "PostgreSQL", integer: "BIGINT", bytes: "BYTEA", orderedText: #"TEXT COLLATE "C""#,
        serialPrimaryKey: "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY", keyOnlyTable: "",
        originalUserColumn: "user_name", beginTransaction: "BEGIN ISOLATION LEVEL READ COMMITTED",
        rowShareLock: " FOR SHARE",
        tableExists:
            "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = $1",
        anyTableExists: "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema() LIMIT 1",
        advisoryLocks: SQLAdvisoryLockSyntax(
            // `SET LOCAL lock_timeout`, which cannot take a parameter; and no statement timeout
            // for the rest of the transaction, so that the connection's 30 s neither ends the
            // wait first nor cuts a long migration.
            timeout: "SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', '0', true)",
            single: "SELECT pg_advisory_xact_lock($1)",
            // The two-key form is a key space of its own, apart from the one-key locks.
            named: "SELECT pg_advisory_xact_lock(CAST($1 AS integer), hashtext($2))"))
}

/// The statements of a dialect's transaction-scoped advisory locks.
struct SQLAdvisoryLockSyntax: Sendable, Hashable {
    /// Sets how long the lock may be waited for, from `$1` ("30s"), until the transaction ends.
    let timeout: String
    /// Takes the lock with the 64-bit key `$1`.
    let single: String
    /// Takes the lock of the name `$2` (hashed) in the 32-bit key space `$1`.
    let named: String
}

/// A lock held until the end of a transaction, which serialises one kind of check-then-write
/// across connections, and across servers sharing one PostgreSQL database.
///
/// The keys are part of the deployment: servers of different releases running side by side
/// must agree on them, so they never change.
struct SQLLock: Sendable, Hashable {
    enum Key: Sendable, Hashable {
        /// One lock for the whole database.
        case single(Int64)
        /// One lock per name in a space: writers of different names do not wait for each
        /// other (unless the names' hashes collide, which only costs a wait).
        case named(space: Int32, name: String)
    }

    let key: Key
    /// How long to wait before the statement fails; nil waits as long as statements may run.
    var timeoutSeconds: Int? = nil
}
