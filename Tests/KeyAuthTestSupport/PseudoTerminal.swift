import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A pseudo-terminal for tests of terminal prompts: the test holds the primary side (what a
/// terminal emulator holds: it reads what is shown, and types), and keeps the subordinate side
/// open so that the terminal and its settings outlive whoever else opens it.
public final class PseudoTerminal: @unchecked Sendable {
    public let primary: Int32
    public let subordinate: Int32
    /// `/dev/pts/N`, for a reader or a child process to open.
    public let path: String

    public init() throws {
        // Glibc's module hides posix_openpt and friends (they need _XOPEN_SOURCE); the ioctls
        // they wrap are what Linux offers underneath.
        // Locals until both sides are open: once every stored property is set, a throw runs
        // deinit, which would close them a second time (by then perhaps another thread's files).
        let primary = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard primary >= 0 else { throw POSIXError(.ENODEV) }
        var unlock: Int32 = 0
        var number: UInt32 = 0
        let tiocsptlck: UInt = 0x4004_5431  // _IOW('T', 0x31, int)
        let tiocgptn: UInt = 0x8004_5430  // _IOR('T', 0x30, unsigned int)
        guard ioctl(primary, tiocsptlck, &unlock) == 0, ioctl(primary, tiocgptn, &number) == 0 else {
            close(primary)
            throw POSIXError(.ENODEV)
        }
        let path = "/dev/pts/\(number)"
        let subordinate = open(path, O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard subordinate >= 0 else {
            close(primary)
            throw POSIXError(.ENODEV)
        }
        self.primary = primary
        self.subordinate = subordinate
        self.path = path
    }

    /// Types `text`.
    public func send(_ text: String) {
        _ = text.utf8CString.withUnsafeBytes { write(primary, $0.baseAddress, $0.count - 1) }
    }

    /// What the terminal shows, waiting up to `milliseconds` for the first byte.
    public func readAvailable(waiting milliseconds: Int32 = 0) -> String {
        var output: [UInt8] = []
        var descriptor = pollfd(fd: primary, events: Int16(POLLIN), revents: 0)
        var wait = milliseconds
        while poll(&descriptor, 1, wait) == 1, descriptor.revents & Int16(POLLIN) != 0 {
            var chunk = [UInt8](repeating: 0, count: 256)
            let count = read(primary, &chunk, chunk.count)
            guard count > 0 else { break }
            output += chunk[0..<count]
            wait = 0
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Whether the terminal echoes what is typed, the setting a secret prompt turns off.
    public var echoIsOn: Bool {
        var settings = termios()
        guard tcgetattr(subordinate, &settings) == 0 else { return false }
        return settings.c_lflag & tcflag_t(ECHO) != 0
    }

    deinit {
        close(subordinate)
        close(primary)
    }
}
