import Foundation
import KeyAuth
import KeyAuthTestSupport
import Testing

/// The database password never reaches the output of the built binary, in whatever form the
/// operator wrote it (issue 20, item 9: `check-config` printed part of a password that held an `@`).
@Suite("The database password in the binary's output")
struct DatabasePasswordTests {
    /// A `--db` value and the password in it, as the operator meant it.
    private struct Location {
        let value: String
        let password: String
        /// Whether libpq reads it as meant, so that the commands may use it.
        let isUsable: Bool
    }

    private static let locations = [
        // A raw "@" or "/" ends libpq's user information early: it would read the password "Qx"
        // and the host "Zy:Wv%3BUt@127.0.0.1", and its errors quote that host.
        Location(
            value: "postgres://keyauth:Qx@Zy:Wv%3BUt@127.0.0.1:1/keyauth", password: "Qx@Zy:Wv%3BUt", isUsable: false),
        Location(value: "postgres://keyauth:Qx/Zy@127.0.0.1:1/keyauth", password: "Qx/Zy", isUsable: false),
        Location(
            value: "postgres://keyauth:Qx%40Zy%3AWv@127.0.0.1:1/keyauth", password: "Qx%40Zy%3AWv", isUsable: true),
        Location(value: "postgres://keyauth:Qx:Zy@127.0.0.1:1/keyauth", password: "Qx:Zy", isUsable: true),
        Location(
            value: "postgres://keyauth@127.0.0.1:1/keyauth?sslmode=disable&password=Qx@Zy:Wv", password: "Qx@Zy:Wv",
            isUsable: true),
        // libpq splits query parameters at "&", and quotes the part without "=" in its error.
        Location(
            value: "postgres://keyauth@127.0.0.1:1/keyauth?password=Qx&ZyWv&sslmode=disable", password: "Qx&ZyWv",
            isUsable: false),
        // A keyword/value connection string is not a URL: it would have been taken for a file name.
        Location(value: "host=127.0.0.1 port=1 dbname=keyauth password=QxZyWv", password: "QxZyWv", isUsable: false),
    ]

    /// Every three characters in a row of `password`, as written and percent-decoded.
    private static func fragments(of password: String) -> Set<String> {
        var forms = [password]
        if let decoded = password.removingPercentEncoding { forms.append(decoded) }
        var fragments: Set<String> = []
        for form in forms {
            let characters = Array(form)
            for start in 0..<max(characters.count - 2, 0) {
                fragments.insert(String(characters[start..<start + 3]))
            }
        }
        return fragments
    }

    /// The fragments of `location`'s password found in `text`.
    private static func leaked(_ location: Location, in text: String) -> [String] {
        fragments(of: location.password).filter { text.contains($0) }.sorted()
    }

    @Test(
        "check-config, the admin commands and serve mask or refuse the location and never print a piece of the password",
        .timeLimit(.minutes(5)))
    func neverPrinted() throws {
        let directory = TemporaryDirectory("keyauth-db-password")
        defer { directory.remove() }
        for location in Self.locations {
            for command in [["check-config"], ["enroll", "alice"], ["devices"], ["audit"]] {
                let result = try KeyAuthServerProcess.runCommand(
                    command + ["--db", location.value, "--config", "/dev/null"], currentDirectory: directory.path)
                let printed = result.output + result.error
                #expect(Self.leaked(location, in: printed).isEmpty, "\(command[0]) \(location.value): \(printed)")
                if !location.isUsable {
                    #expect(result.status == 64, "\(command[0]) \(location.value): \(printed)")
                    #expect(printed.contains("--db"))
                }
            }
            let checked = try KeyAuthServerProcess.runCommand(
                ["check-config", "--db", location.value, "--config", "/dev/null"], currentDirectory: directory.path)
            if location.isUsable {
                #expect(checked.status == 0)
                #expect(checked.output.contains("db = postgres://keyauth"))
                #expect(checked.output.contains("***"))
            }
            // No file was made of a location that is not a file's.
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path).isEmpty)
        }
    }

    @Test(
        "serve refuses or fails to connect without printing a piece of the password", .timeLimit(.minutes(5)))
    func serveNeverPrints() throws {
        let directory = TemporaryDirectory("keyauth-db-password")
        defer { directory.remove() }
        for (index, location) in Self.locations.enumerated() where location.value.hasPrefix("postgres://") {
            let server = try KeyAuthServerProcess(
                name: "password-\(index)",
                arguments: ["serve", "--listen", "127.0.0.1:0", "--metrics-listen", "off", "--db", location.value],
                logPath: directory.path + "/serve-\(index).log")
            let status = server.waitUntilExit(timeout: 60)
            #expect(status == (location.isUsable ? 69 : 64), "\(location.value): \(server.log)")
            #expect(Self.leaked(location, in: server.log).isEmpty, "\(location.value): \(server.log)")
        }
    }
}
