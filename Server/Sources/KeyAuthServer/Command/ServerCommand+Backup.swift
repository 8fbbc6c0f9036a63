import Glibc
import KeyAuth

/// `keyauth-server backup FILE`: a consistent copy of a SQLite database, even of a live one.
extension ServerCommand {
    /// Copies the SQLite database at `database` into the new file `destination` with SQLite's
    /// online backup API, readable by the server's user only (0600): the copy holds the server's
    /// signing key.
    ///
    /// Refuses a PostgreSQL database (`pg_dump` backs those up) and an existing `destination`,
    /// so that a slip cannot overwrite the database or an older backup. After the copy, SQLite's
    /// `quick_check` must pass on it.
    ///
    /// The copy is made under a name of its own beside `destination` and linked to it only once
    /// it is whole, checked and on disk: a backup killed halfway (Ctrl-C, the OOM killer) left a
    /// torn file under the backup's name, which a restore would take for a backup, and which
    /// refused the retry as existing.
    static func backup(database: String, to destination: String, output: Output) -> Int32 {
        guard !StorageFactory.isPostgresURL(database) else {
            output.error(
                "keyauth-server: backup copies a SQLite database; back up PostgreSQL with pg_dump "
                    + "(pg_dump --format=custom --file=FILE DATABASE), see docs/SERVER.md\n")
            return ExitStatus.usage
        }
        // The checks of every admin command, before the copy is created: a wrong file is refused
        // as such (65), not as a failed copy (1).
        let source: SQLiteConnection
        do {
            try StorageFactory.checkSQLiteFile(database, creatingIfMissing: false)
            source = try SQLiteConnection(path: database, busyTimeoutMilliseconds: 5000)
            _ = try SQLSchema.requireKeyAuth(source, location: database)
        } catch {
            output.error("keyauth-server: \(error.description)\n")
            return exitStatus(for: error)
        }
        var existing = stat()
        guard lstat(destination, &existing) != 0 else {
            output.error("keyauth-server: cannot create the backup \(destination): it exists; choose a new name\n")
            return ExitStatus.failure
        }
        let partial: String
        do {
            partial = try createPartial(beside: destination)
        } catch {
            output.error("keyauth-server: \(error.description)\n")
            return ExitStatus.failure
        }
        do {
            try copy(source, into: partial)
            try publish(partial, as: destination)
        } catch {
            unlink(partial)
            output.error("keyauth-server: \(error.description)\n")
            return ExitStatus.failure
        }
        var info = stat()
        let size = stat(destination, &info) == 0 ? " (\(info.st_size) bytes)" : ""
        output.error("keyauth-server: backed up \(database) to \(destination)\(size)\n")
        return ExitStatus.success
    }

    /// Creates the empty file the copy is made in, beside `destination` (so that it can be linked
    /// there), mode 0600, under a random name: a fixed one (the PID, which is 1 in a container)
    /// left by a killed run would refuse every retry.
    private static func createPartial(beside destination: String) throws(StorageError) -> String {
        for _ in 0..<5 {
            let suffix: String
            do {
                suffix = Base64URL.encode(try CryptoPrimitives.randomBytes(count: 6))
            } catch {
                throw StorageError(.queryFailed, "cannot name the backup's partial file: \(error.message)")
            }
            let partial = destination + ".partial-" + suffix
            let descriptor = open(partial, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
            if descriptor < 0 && errno == EEXIST { continue }
            guard descriptor >= 0 else {
                throw StorageError(
                    .queryFailed, "cannot create the backup \(partial): \(String(cString: strerror(errno)))")
            }
            // The mode is explicit, whatever the umask.
            fchmod(descriptor, 0o600)
            close(descriptor)
            return partial
        }
        throw StorageError(.queryFailed, "cannot create a partial file beside \(destination): the names are taken")
    }

    /// Makes the finished copy `partial` the backup `destination`: synced, then linked (which,
    /// unlike a rename, fails rather than replace a file made there meanwhile), the link made
    /// durable by syncing the directory, and the partial name removed. On a file system without
    /// hard links (vfat, exFAT, some network and FUSE mounts), renamed after checking again that
    /// nothing is there.
    static func publish(_ partial: String, as destination: String) throws(StorageError) {
        let file = open(partial, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard file >= 0, fsync(file) == 0 else {
            let reason = String(cString: strerror(errno))
            if file >= 0 { close(file) }
            throw StorageError(.queryFailed, "cannot sync the backup: \(reason)")
        }
        close(file)
        func refusal(_ reason: String) -> StorageError {
            StorageError(.queryFailed, "cannot create the backup \(destination): \(reason)")
        }
        if link(partial, destination) == 0 {
            unlink(partial)
        } else {
            let linkError = errno
            var existing = stat()
            if linkError == EEXIST || lstat(destination, &existing) == 0 {
                throw refusal("it exists; choose a new name")
            }
            guard [EPERM, EOPNOTSUPP, ENOSYS].contains(linkError) else {
                throw refusal(String(cString: strerror(linkError)))
            }
            guard rename(partial, destination) == 0 else { throw refusal(String(cString: strerror(errno))) }
        }
        let directory = SecureFile.parentDirectory(of: destination)
        let handle = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard handle >= 0, fsync(handle) == 0 else {
            let reason = String(cString: strerror(errno))
            if handle >= 0 { close(handle) }
            throw StorageError(
                .queryFailed, "the backup \(destination) is written, but its directory cannot be synced: \(reason)")
        }
        close(handle)
    }

    /// The copy itself; the connection to it is closed on return (SQLite then removes its
    /// `-wal` and `-shm` files), before the copy is published.
    private static func copy(_ source: SQLiteConnection, into destination: String) throws(StorageError) {
        let target = try SQLiteConnection(path: destination, busyTimeoutMilliseconds: 5000)
        try source.backup(into: target)
        try markAsInterrupted(target)
        let check = try target.execute("PRAGMA quick_check").firstRow?.text(0)
        guard check == "ok" else {
            throw StorageError(.queryFailed, "the backup does not pass SQLite's quick_check: \(check ?? "no answer")")
        }
        // The copy is in WAL mode like its source: make it one self-contained file.
        try target.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        try SQLiteFilePermissions.restrict(destination)
    }

    /// Makes a server started on the copy treat it as a crash of the server it came from, so
    /// that for its first seconds it refuses every token issued before its start (PROTOCOL.md
    /// section 2, "Replay cache"): assertions accepted after the backup are in no copy, and
    /// must not be accepted again. A running memory cache's copy says so already; a cleanly
    /// stopped server's copy said it had stopped, and a database-mode server writes no marker.
    private static func markAsInterrupted(_ copy: SQLiteConnection) throws(StorageError) {
        let owner = SQLValue.text(SQLStorage.replaySnapshotKeyID)
        try copy.transaction { () throws(StorageError) in
            try copy.execute(
                "DELETE FROM used_jtis WHERE key_id = $1 AND jti = $2", [owner, .text(ReplayGuard.stoppedMarker)])
            try copy.execute(
                "INSERT INTO used_jtis (key_id, jti, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                [owner, .text(ReplayGuard.runningMarker), .integer(ReplayGuard.markerExpiry)])
        }
    }
}
