import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A write is reported done only once it is durable: a failed `close` or directory `fsync` is an
/// error, not silence.
///
/// Each test takes milliseconds; the limit only guards against a hang. It is long because a
/// full run's tests that wait synchronously (servers, processes) can hold both threads of the
/// cooperative pool for minutes on a 2-core machine, and these then wait for one (`.ci/run`
/// once timed them out at 2 minutes).
@Suite("SecureFile durability", .timeLimit(.minutes(10)))
struct SecureFileDurabilityTests {
    @Test("a failed close fails the write and leaves the previous file")
    func failedClose() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let path = temporary.path + "/secret"
        try SecureFile.write(Array("old\n".utf8), to: path)
        let failing = SecureFile.DurabilityCalls(close: { descriptor in
            _ = Glibc.close(descriptor)
            errno = EIO
            return -1
        })
        #expect {
            try SecureFile.write(Array("new\n".utf8), to: path, calls: failing)
        } throws: { error in
            let error = error as? KeyAuthError
            return error?.code == .storageFailed && error?.message.contains("cannot close \(path)") == true
        }
        #expect(try SecureFile.readProtected(path) == Array("old\n".utf8))
        let left = try FileManager.default.contentsOfDirectory(atPath: temporary.path)
        #expect(left == ["secret"])
    }

    @Test("a write that must not replace keeps a file another process made while it wrote, and leaves no temporary")
    func noReplaceLosesToAnEarlierWriter() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let path = temporary.path + "/ca-key"
        // The other process's file appears after this one checked and before it links its own.
        let racing = SecureFile.DurabilityCalls(fsync: { descriptor in
            if !FileManager.default.fileExists(atPath: path) {
                FileManager.default.createFile(atPath: path, contents: Data("theirs\n".utf8))
            }
            return Glibc.fsync(descriptor)
        })
        #expect {
            try SecureFile.write(Array("ours\n".utf8), to: path, replacing: false, calls: racing)
        } throws: { error in
            (error as? KeyAuthError)?.code == .keyExists
        }
        #expect(FileManager.default.contents(atPath: path) == Data("theirs\n".utf8))
        #expect(try FileManager.default.contentsOfDirectory(atPath: temporary.path) == ["ca-key"])
        // With nothing there, it is written as a replacing write would.
        let fresh = temporary.path + "/fresh"
        try SecureFile.write(Array("ours\n".utf8), to: fresh, replacing: false)
        #expect(try SecureFile.readProtected(fresh) == Array("ours\n".utf8))
    }

    @Test("a failed fsync of the directory is reported after the rename")
    func failedDirectorySync() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let path = temporary.path + "/secret"
        let failing = SecureFile.DurabilityCalls(fsync: { descriptor in
            var info = stat()
            guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
                return Glibc.fsync(descriptor)
            }
            errno = EIO
            return -1
        })
        #expect {
            try SecureFile.write(Array("new\n".utf8), to: path, calls: failing)
        } throws: { error in
            let error = error as? KeyAuthError
            return error?.code == .storageFailed
                && error?.message.contains("cannot sync its directory \(temporary.path)") == true
        }
    }
}
