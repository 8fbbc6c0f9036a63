import Foundation
import Glibc
import KeyAuthTestSupport

/// A real file system of a few megabytes (a tmpfs mounted on a fresh directory) that a test can
/// fill to the last block and free again: the full disk of an incident, without filling the
/// machine's. Mounting needs root (`CAP_SYS_ADMIN`); tests check ``canMount`` first.
final class SmallDisk {
    /// Where the file system is mounted (mode 0700, as the server wants its database's folder).
    let path: String
    private let directory: TemporaryDirectory
    private var isMounted = false

    /// Whether this process may mount a tmpfs: only root may.
    static var canMount: Bool { geteuid() == 0 }

    /// Mounts a tmpfs of `megabytes` on a fresh directory.
    ///
    /// - Throws: ``TestFailure`` with `errno`'s text when `mount(2)` refuses.
    init(megabytes: Int) throws {
        directory = TemporaryDirectory("keyauth-small-disk")
        path = directory.path
        guard mount("keyauth-test", path, "tmpfs", 0, "size=\(megabytes)m,mode=0700") == 0 else {
            let reason = String(cString: strerror(errno))
            directory.remove()
            throw TestFailure("cannot mount a tmpfs on \(path): \(reason)")
        }
        isMounted = true
    }

    deinit {
        unmount()
    }

    /// Writes a filler file until the file system has no block left; returns its size in bytes.
    ///
    /// - Throws: ``TestFailure`` when a write fails with anything but `ENOSPC`.
    @discardableResult
    func fill() throws -> Int {
        let descriptor = open(path + "/filler", O_WRONLY | O_CREAT | O_APPEND, 0o600)
        guard descriptor >= 0 else {
            throw TestFailure("cannot create the filler: \(String(cString: strerror(errno)))")
        }
        defer { close(descriptor) }
        let block = [UInt8](repeating: 0x5A, count: 4096)
        var written = 0
        while true {
            let count = block.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
            if count > 0 {
                written += count
                continue
            }
            if count < 0 && errno == EINTR { continue }
            guard count < 0 && errno == ENOSPC else {
                throw TestFailure("writing the filler failed: \(String(cString: strerror(errno)))")
            }
            return written
        }
    }

    /// Deletes the filler: the space is free again.
    func free() {
        unlink(path + "/filler")
    }

    /// Unmounts (lazily, should a process still hold a file open) and removes the directory.
    /// Idempotent.
    func unmount() {
        guard isMounted else { return }
        isMounted = false
        umount2(path, Int32(MNT_DETACH))
        directory.remove()
    }
}
