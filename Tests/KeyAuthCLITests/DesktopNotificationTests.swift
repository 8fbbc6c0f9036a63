import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuthCLI

@Suite("Desktop notifications of sign-in requests", .timeLimit(.minutes(10)))
struct DesktopNotificationTests {
    /// An application's name, chosen by whoever registered the application, meant to read as
    /// markup and as `notify-send` options.
    static let hostileName = "--urgency=critical <a href=\"https://evil.example\">Bank</a> & <img src='/x'>"

    @Test("the body is escaped for the notification markup and comes after the end of the options")
    func argumentsEscapeTheRequestersText() {
        let arguments = DesktopNotification.arguments(title: "keyauth: approve a sign-in?", body: Self.hostileName)
        #expect(
            arguments == [
                "--app-name=keyauth", "--", "keyauth: approve a sign-in?",
                "--urgency=critical &lt;a href=&quot;https://evil.example&quot;&gt;Bank&lt;/a&gt; &amp; "
                    + "&lt;img src=&apos;/x&apos;&gt;",
            ])
        #expect(DesktopNotification.markupEscaped("Team wiki (é)") == "Team wiki (é)")
    }

    @Test("notify-send receives those arguments, the title and body as text")
    func showRunsNotifySend() async throws {
        let directory = TemporaryDirectory("notify")
        defer { directory.remove() }
        let recorded = directory.path + "/arguments"
        let script = directory.path + "/notify-send"
        try "#!/bin/sh\nprintf '%s\\n' \"$@\" > \(recorded).partial && mv \(recorded).partial \(recorded)\n"
            .write(toFile: script, atomically: true, encoding: .utf8)
        chmod(script, 0o755)
        DesktopNotification.show(
            title: "keyauth: a recovery code was used", body: "-x <b>",
            environment: ["DISPLAY": ":0", "PATH": directory.path])
        var lines: [String] = []
        // Up to 30 s: the whole suite running beside it can hold a process's start up.
        for _ in 0..<600 {
            if let text = try? String(contentsOfFile: recorded, encoding: .utf8) {
                lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(lines == ["--app-name=keyauth", "--", "keyauth: a recovery code was used", "-x &lt;b&gt;", ""])
        // Without a graphical session nothing runs.
        try? FileManager.default.removeItem(atPath: recorded)
        DesktopNotification.show(title: "t", body: "b", environment: ["PATH": directory.path])
        try await Task.sleep(for: .milliseconds(300))
        #expect(!FileManager.default.fileExists(atPath: recorded))
    }

    @Test(
        "the real notify-send reads a body that starts with a dash as text",
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/notify-send")))
    func realNotifySendParsesTheBodyAsText() throws {
        func standardError(_ arguments: [String]) throws -> String {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/notify-send")
            process.arguments = arguments
            // No session bus: notify-send parses its arguments, then fails to reach a daemon.
            process.environment = ["PATH": "/usr/bin:/bin", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent"]
            let pipe = Pipe()
            process.standardError = pipe
            process.standardOutput = FileHandle.nullDevice
            try process.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
        // Without `--`, the name is an option notify-send does not know (or one it obeys).
        #expect(try standardError(["--app-name=keyauth", "title", "--bogus-option"]).contains("Unknown option"))
        let escaped = try standardError(DesktopNotification.arguments(title: "title", body: "--bogus-option"))
        #expect(!escaped.contains("Unknown option"), "\(escaped)")
        #expect(!escaped.isEmpty, "notify-send should still fail for want of a session bus")
    }
}
