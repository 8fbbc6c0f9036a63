import Foundation

/// A server process's wall clock that a test sets while it runs: libfaketime, preloaded, reads
/// the offset from a file at every clock reading (monotonic clocks left alone, so that timeouts
/// stay real).
struct SettableClock {
    /// libfaketime as Debian's `faketime` package installs it.
    static let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
    static let isInstalled = FileManager.default.fileExists(atPath: library)

    let offsetFile: String

    /// A clock whose offset file is in `directory`, set to the real time.
    init(in directory: String) throws {
        offsetFile = directory + "/offset"
        try set("+0s")
    }

    /// Sets the offset from the real clock, as libfaketime writes it: `"+70s"`, `"-5s"`.
    func set(_ offset: String) throws {
        try (offset + "\n").write(toFile: offsetFile, atomically: true, encoding: .utf8)
    }

    /// The server process's extra environment.
    var environment: [String: String] {
        [
            "LD_PRELOAD": Self.library, "FAKETIME_TIMESTAMP_FILE": offsetFile, "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        ]
    }
}
