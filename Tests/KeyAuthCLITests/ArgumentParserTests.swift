import KeyAuthArguments
import Testing

@Suite("The argument parser both commands share")
struct ArgumentParserTests {
    private let keyauth = ArgumentSyntax.keyauth(valueOptions: ["user", "name"], flags: ["json"])
    private let server = ArgumentSyntax.keyauthServer(flags: ["quiet"])

    @Test("keyauth's syntax: values in both forms, repeated flags, -- ends the options")
    func keyauthSyntax() throws {
        let parsed = try ArgumentParser.parse(
            ["--user", "alice", "--name=laptop", "--json", "--json", "list", "--", "--user"], syntax: keyauth)
        #expect(parsed.values == ["user": "alice", "name": "laptop"])
        #expect(parsed.flags == ["json": true])
        #expect(parsed.positionals == ["list", "--user"])
    }

    @Test(
        "keyauth's syntax refuses what its contract refuses",
        arguments: [
            (["--user"], ArgumentError.missingValue("user")), (["--user", "--json"], .missingValue("user")),
            (["--user="], .emptyValue("user")), (["--user", "a", "--user", "b"], .repeated("user")),
            (["--json=yes"], .flagTakesNoValue("json")), (["--bogus"], .unknownOption("--bogus")),
            (["--bogus=1"], .unknownOption("--bogus")), (["-x"], .unknownOption("-x")),
        ])
    func keyauthRefusals(arguments: [String], expected: ArgumentError) {
        #expect(throws: expected) { try ArgumentParser.parse(arguments, syntax: keyauth) }
    }

    @Test("keyauth-server's syntax: any option takes a value, which may start with dashes; flags take booleans")
    func serverSyntax() throws {
        var parsed = try ArgumentParser.parse(
            ["enroll", "--db", "--odd-name.db", "--quiet=no", "-x", "--extra", "1"], syntax: server)
        #expect(parsed.value("db") == "--odd-name.db")
        #expect(parsed.flag("quiet") == false)
        #expect(parsed.positionals == ["enroll", "-x"])
        #expect(parsed.unreadOptions() == ["extra"])
    }

    @Test(
        "keyauth-server's syntax refuses repeats before reading and bad booleans",
        arguments: [
            (["--db", "a", "--db"], ArgumentError.repeated("db")), (["--quiet", "--quiet"], .repeated("quiet")),
            (["--quiet=maybe"], .invalidBoolean("quiet")),
        ])
    func serverRefusals(arguments: [String], expected: ArgumentError) {
        #expect(throws: expected) { try ArgumentParser.parse(arguments, syntax: server) }
    }

    @Test("keyauth-server's syntax leaves a last option without a value to the caller: unknown, or missing its value")
    func serverMissingValue() throws {
        var parsed = try ArgumentParser.parse(["--listen", "x", "--bogus"], syntax: server)
        #expect(parsed.value("listen") == "x")
        #expect(parsed.unreadOptions() == ["bogus"])
        #expect(parsed.readOptionsMissingValues().isEmpty)
        var known = try ArgumentParser.parse(["--db"], syntax: server)
        #expect(known.value("db") == nil)
        #expect(known.readOptionsMissingValues() == ["db"])
        #expect(known.unreadOptions().isEmpty)
    }
}
