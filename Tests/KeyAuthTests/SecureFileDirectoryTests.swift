import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Secrets are trusted only in directories the user alone controls: 0600 files in 0700
/// directories, the looser refused, on reading as on writing.
@Suite("SecureFile directories", .timeLimit(.minutes(5)))
struct SecureFileDirectoryTests {
    private func caught(_ body: () throws -> Void) -> KeyAuthError? {
        do {
            try body()
            return nil
        } catch {
            return error as? KeyAuthError
        }
    }

    @Test(
        "a key in a directory with group or other permissions is refused, naming chmod 700",
        arguments: [0o755, 0o750, 0o711, 0o701])
    func refusesLooseDirectory(_ mode: Int) throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path + "/key")
        try store.store(TestKeys.first)
        #expect(chmod(store.directory, mode_t(mode)) == 0)
        let error = caught { _ = try store.loadPrivateKey() }
        #expect(error?.code == .keyUnprotected)
        #expect(error?.message.contains("chmod 700 \(store.directory)") == true, "\(error?.message ?? "")")
        #expect(caught { _ = try store.loadPublicKey() }?.code == .keyUnprotected)
        #expect(caught { _ = try SecureFile.readProtected(store.privateKeyPath) }?.code == .keyUnprotected)
        #expect(chmod(store.directory, 0o700) == 0)
        #expect(caught { _ = try store.loadPrivateKey() } == nil)
    }

    @Test("a missing secret is still not-found in a loose directory")
    func missingInLooseDirectory() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        #expect(chmod(temporary.path, 0o755) == 0)
        #expect(caught { _ = try SecureFile.readProtected(temporary.path + "/absent") }?.code == .keyNotFound)
    }

    @Test("a directory of another user is refused when reading a secret and when creating one")
    func refusesOtherOwner() throws {
        guard geteuid() == 0 else { return }  // only root can give a directory away
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path + "/key")
        try store.store(TestKeys.first)
        #expect(chown(store.directory, 65534, 65534) == 0)
        let reading = caught { _ = try store.loadPrivateKey() }
        #expect(reading?.code == .keyUnprotected)
        #expect(reading?.message.contains("belongs to uid 65534") == true, "\(reading?.message ?? "")")
        let creating = caught { try SecureFile.createDirectory(store.directory) }
        #expect(creating?.code == .keyUnprotected)
        #expect(creating?.message.contains(store.directory) == true)
        // Refused, not tightened: its mode stays its owner's business.
        #expect(chmod(store.directory, 0o755) == 0)
        #expect(caught { try SecureFile.createDirectory(store.directory) }?.code == .keyUnprotected)
        var info = stat()
        #expect(stat(store.directory, &info) == 0 && info.st_mode & 0o777 == 0o755)
    }

    @Test("an old temporary file of a writer that died is removed by the next write; a live or recent one's stays")
    func abandonedTemporaries() throws {
        let temporary = TemporaryDirectory()
        defer { temporary.remove() }
        let store = KeyPairStore(directory: temporary.path + "/key")
        try store.store(TestKeys.first)
        // A process that has ended: its id names no process any more.
        let ended = Process()
        ended.executableURL = URL(fileURLWithPath: "/bin/true")
        try ended.run()
        ended.waitUntilExit()
        let dead = "\(store.directory)/.tmp-\(ended.processIdentifier)-AbCdEf"
        let live = "\(store.directory)/.tmp-\(getppid())-GhIjKl"
        let unnamed = "\(store.directory)/.tmp-MnOpQr"
        // The same dead writer's file from a minute ago: another host's or container's writer
        // may be using that pid now, so it stays until it is ten minutes old.
        let recent = "\(store.directory)/.tmp-\(ended.processIdentifier)-StUvWx"
        let hourAgo = Date().addingTimeInterval(-3600)
        for path in [dead, live, unnamed, recent] {
            #expect(FileManager.default.createFile(atPath: path, contents: Data("copy".utf8)))
            if path != recent {
                try FileManager.default.setAttributes([.modificationDate: hourAgo], ofItemAtPath: path)
            }
        }
        try SecureFile.write(Array("new\n".utf8), to: store.directory + "/token.json")
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(FileManager.default.fileExists(atPath: recent))
        #expect(FileManager.default.fileExists(atPath: live))
        #expect(FileManager.default.fileExists(atPath: unnamed))
        #expect(try SecureFile.readProtected(store.directory + "/token.json") == Array("new\n".utf8))
        #expect(try store.loadPrivateKey().publicKey == TestKeys.first.publicKey)
    }

    @Test(
        "a temporary file with a modification time at the far end of 64 bits is left alone, not a crash",
        .enabled(if: FileManager.default.fileExists(atPath: "/dev/shm"), "needs tmpfs at /dev/shm"))
    func farPastTemporary() throws {
        // tmpfs keeps 64-bit timestamps; the root file system may clamp them.
        let directory = "/dev/shm/keyauth-far-past-\(getpid())"
        try #require(mkdir(directory, 0o700) == 0)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let planted = directory + "/.tmp-1-AbCdEf"
        #expect(FileManager.default.createFile(atPath: planted, contents: Data("copy".utf8)))
        var times = [timespec(tv_sec: 0, tv_nsec: 0), timespec(tv_sec: .min, tv_nsec: 0)]
        try #require(utimensat(AT_FDCWD, planted, &times, 0) == 0)
        var info = stat()
        #expect(stat(planted, &info) == 0 && info.st_mtim.tv_sec == .min)
        try SecureFile.write(Array("new\n".utf8), to: directory + "/token.json")
        #expect(try SecureFile.readProtected(directory + "/token.json") == Array("new\n".utf8))
        #expect(FileManager.default.fileExists(atPath: planted))
    }
}
