import Foundation
import KeyAuthTestSupport
import Testing

@testable import KeyAuth

#if canImport(Glibc)
    import Glibc
#endif

/// Serialized: the terminal tests share the one process-wide slot that keeps a waiting
/// prompt's settings for a signal handler.
@Suite("Presence readers", .serialized, .timeLimit(.minutes(10)))
struct PresenceReaderTests {
    /// A pipe whose write end the test feeds.
    private struct Pipe {
        let read: Int32
        let write: Int32

        init() throws {
            var descriptors: [Int32] = [0, 0]
            guard pipe(&descriptors) == 0 else { throw KeyAuthError(.storageFailed, "pipe failed") }
            read = descriptors[0]
            write = descriptors[1]
        }

        func send(_ text: String) {
            _ = text.utf8CString.withUnsafeBytes { Glibc.write(write, $0.baseAddress, $0.count - 1) }
        }
    }

    @Test("standard input yields one line at a time without its newline or carriage return")
    func standardInputLines() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send("1234\nabcd\r\ntail")
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read)
        #expect(text(try reader.readSecret(prompt: "PIN: ")) == "1234")
        #expect(text(try reader.readLine(prompt: "", echo: true)) == "abcd")
        #expect(text(try reader.readSecret(prompt: "")) == "tail")
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "") }
        #expect(error?.code == .cancelled)
        #expect(error?.message == "standard input ended before an answer was given")
    }

    @Test("an answer longer than 512 bytes is refused, also when a carriage return falls at the limit")
    func standardInputTooLongAtCarriageReturn() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        // 512 bytes, CR, one more byte: 514 typed, never cut to the first 512.
        pipe.send(String(repeating: "A", count: 512) + "\rB\n" + String(repeating: "C", count: 512) + "\r\n")
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read)
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "") }
        #expect(error?.code == .invalidArgument)
        // Exactly 512 bytes with a CRLF ending is an answer.
        #expect(text(try reader.readSecret(prompt: "")) == String(repeating: "C", count: 512))
    }

    @Test("the end of standard input is reported in lower case, naming what was expected when the caller says")
    func standardInputEnded() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read, endOfInputMessage: "no PIN here")
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "") }
        #expect(error?.code == .cancelled)
        #expect(error?.message == "no PIN here")
    }

    @Test("an empty line is an empty answer, not the end of input")
    func standardInputEmptyLine() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send("\n")
        close(pipe.write)
        let secret = try StandardInputSecretReader(fileDescriptor: pipe.read).readSecret(prompt: "")
        #expect(secret.count == 0)
    }

    @Test("a line longer than PAM's limit is rejected")
    func standardInputTooLong() async throws {
        let pipe = try Pipe()
        defer { close(pipe.read) }
        pipe.send(String(repeating: "x", count: 600) + "\nnext\n")
        close(pipe.write)
        let reader = StandardInputSecretReader(fileDescriptor: pipe.read)
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "") }
        #expect(error?.code == .invalidArgument)
        #expect(text(try reader.readSecret(prompt: "")) == "next")
    }

    @Test("a fixed reader answers in order and then cancels")
    func fixedReader() async throws {
        let reader = FixedSecretReader(answers: ["one"])
        #expect(text(try reader.readSecret(prompt: "first")) == "one")
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "second") }
        #expect(error?.code == .cancelled)
        #expect(reader.requests.map(\.prompt) == ["first", "second"])
    }

    @Test("a terminal reader without a terminal is unavailable")
    func noTerminal() async throws {
        let reader = TerminalSecretReader(devicePath: "/nonexistent/tty")
        #expect(!reader.isAvailable())
        let error = #expect(throws: KeyAuthError.self) { try reader.readSecret(prompt: "PIN: ") }
        #expect(error?.code == .presenceUnavailable)
        let notATerminal = TerminalSecretReader(devicePath: "/dev/null")
        #expect(!notATerminal.isAvailable())
        let error2 = #expect(throws: KeyAuthError.self) { try notATerminal.readSecret(prompt: "") }
        #expect(error2?.code == .presenceUnavailable)
    }

    @Test("the terminal reader prompts on a pseudo-terminal with echo off and restores echo")
    func pseudoTerminalEchoOff() async throws {
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        #expect(reader.isAvailable())
        async let answer = BlockingThread.read(reader, prompt: "PIN: ")
        var output = try await terminal.readUntil("PIN: ")
        terminal.send("s3cret\n")
        #expect(text(try await answer) == "s3cret")
        try await Task.sleep(for: .milliseconds(50))
        output += terminal.readAvailable()
        #expect(!output.contains("s3cret"))
        #expect(terminal.echoIsOn)
    }

    @Test("an interrupt at a waiting prompt restores echo and ends the line, once")
    func interruptRestoresTerminal() async throws {
        #expect(!TerminalSecretReader.restoreTerminalAfterInterrupt())
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        async let answer = BlockingThread.read(reader, prompt: "PIN: ")
        _ = try await terminal.readUntil("PIN: ")
        #expect(!terminal.echoIsOn)
        #expect(TerminalSecretReader.restoreTerminalAfterInterrupt())
        #expect(terminal.echoIsOn)
        #expect(terminal.readAvailable(waiting: 500) == "\r\n")
        #expect(!TerminalSecretReader.restoreTerminalAfterInterrupt())
        // The prompt, still reading, finishes without ending the line a second time: all that
        // shows is the terminal's own echo, on again.
        terminal.send("s3cret\n")
        #expect(text(try await answer) == "s3cret")
        try await Task.sleep(for: .milliseconds(100))
        #expect(terminal.readAvailable(waiting: 200) == "s3cret\r\n")
        #expect(terminal.echoIsOn)
    }

    @Test("the terminal reader shows the answer when echo is requested")
    func pseudoTerminalEchoOn() async throws {
        let terminal = try PseudoTerminal()
        let reader = TerminalSecretReader(devicePath: terminal.path)
        async let answer = BlockingThread.read(reader, prompt: "Code: ", echo: true)
        _ = try await terminal.readUntil("Code: ")
        terminal.send("778899\n")
        #expect(text(try await answer) == "778899")
        try await Task.sleep(for: .milliseconds(50))
        #expect(terminal.readAvailable().contains("778899"))
    }
}

extension PseudoTerminal {
    /// Reads what the terminal shows until `marker` appears, for at most five seconds.
    ///
    /// It sleeps between polls instead of blocking, so that other tests' tasks keep a thread of
    /// the small cooperative pool.
    func readUntil(_ marker: String) async throws -> String {
        var output = ""
        for _ in 0..<250 where !output.contains(marker) {
            output += readAvailable()
            try await Task.sleep(for: .milliseconds(20))
        }
        guard output.contains(marker) else {
            throw KeyAuthError(.presenceUnavailable, "no prompt, got \(output.debugDescription)")
        }
        return output
    }
}
