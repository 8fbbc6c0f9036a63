import Foundation
import KeyAuth
import KeyAuthCLI
import KeyAuthTestSupport
import Synchronization
import Testing

/// A registration whose answer is lost after the server stored the device keeps the key, and
/// running the same `keyauth register` again finishes it with that key, even though the first
/// attempt used up the one-time enrollment code.
@Suite("keyauth register after a lost answer", .timeLimit(.minutes(5)))
struct RegistrationLostAnswerTests {
    @Test("the server stores the device, the reply is lost; the key stays, a refused retry keeps it, one more finishes")
    func lostReplyThenRegisterAgain() async throws {
        try await withFirstDevice { _, second, server in
            try await lostReplyThenRegisterAgain(server, second)
        }
    }

    private func lostReplyThenRegisterAgain(_ server: InProcessKeyAuthServer, _ second: CommandHarness) async throws {
        // alice has a device: the second is active at once only with a code, usable once.
        let code = try server.enrollmentCode(for: "alice")
        let command = [
            "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin",
            "--enrollment-code", code,
        ]
        server.replaceAnswers(to: "POST", "/v1/devices", with: .lost, serverActsFirst: true)
        let lost = await second.run(command, standardInput: "246813\n")
        #expect(lost.status == 69, "\(lost.standardError)")
        expectOneErrorLine(lost)
        #expect(lost.standardError.contains("closed the connection without an answer"), "\(lost.standardError)")
        #expect(lost.standardError.contains("running the same `keyauth register` again"))
        #expect(!lost.standardError.contains("URL error"))
        let name = try #require(second.accounts.accountNames().first)
        let keys = try second.accounts.keyPairStore(for: name)
        #expect(keys.hasKey)
        let keyID = try keys.loadPublicKey().fingerprint
        #expect(server.status(of: keyID) == "active")

        // A retry refused before the server looks at the key (a rate limit, PROTOCOL.md section
        // 6) says nothing about the first attempt: the key and the account stay.
        server.replaceAnswers(
            to: "POST", "/v1/devices", with: .oauthError(429, "slow_down", "too many registrations from this address"),
            serverActsFirst: false)
        let limited = await second.run(command, standardInput: "246813\n")
        #expect(limited.status == 75)
        expectOneErrorLine(limited)
        #expect(limited.standardError.contains("slow_down"), "\(limited.standardError)")
        #expect(limited.standardError.contains("are kept"), "\(limited.standardError)")
        #expect(try second.accounts.keyPairStore(for: name).loadPublicKey().fingerprint == keyID)
        #expect(try second.accounts.load(name).status == .registering)
        // A device policy's 403 also refuses this attempt only.
        let policyRefusal = LoopbackHTTPResponder.Response.oauthError(
            403, "access_denied", "this server's device policy refuses the registration")
        server.replaceAnswers(to: "POST", "/v1/devices", with: policyRefusal, serverActsFirst: false)
        let policy = await second.run(command, standardInput: "246813\n")
        #expect(policy.status == 77)
        #expect(policy.standardError.contains("are kept"), "\(policy.standardError)")
        #expect(!policy.standardError.contains("enrollment code"), "\(policy.standardError)")
        #expect(try second.accounts.keyPairStore(for: name).loadPublicKey().fingerprint == keyID)

        server.interceptor = nil
        let again = await second.run(command, standardInput: "246813\n")
        #expect(again.status == 0, "\(again.standardError)")
        #expect(try second.accounts.keyPairStore(for: name).loadPublicKey().fingerprint == keyID)
        let account = try second.accounts.load(name)
        #expect(account.status == .active)
        #expect(account.keyID == keyID)
        #expect(server.keyIDs(withStatus: "active").count == 2)
        #expect(server.keyIDs(withStatus: "pending").isEmpty)
        #expect(await second.run(["login", "--account", name, "--pin-stdin"], standardInput: "246813\n").status == 0)
    }

    @Test("a registration sent again and then denied leaves nothing behind, and says to start again")
    func resentThenDenied() async throws {
        try await withFirstDevice { _, second, server in
            try await resentThenDenied(server, second)
        }
    }

    private func resentThenDenied(_ server: InProcessKeyAuthServer, _ second: CommandHarness) async throws {
        // Without a code, the second device waits for the first to approve it.
        let command = [
            "register", "--server", server.url, "--user", "alice", "--bits", "2048", "--pin-stdin", "--no-wait",
        ]
        server.replaceAnswers(to: "POST", "/v1/devices", with: .lost, serverActsFirst: true)
        let lost = await second.run(command, standardInput: "246813\n")
        #expect(lost.status == 69, "\(lost.standardError)")
        let name = try #require(second.accounts.accountNames().first)
        let keyID = try second.accounts.keyPairStore(for: name).loadPublicKey().fingerprint
        #expect(server.status(of: keyID) == "pending")

        // Denied on the server while this device did not know it was registered: the stored key
        // is sent again, the server answers with its record, and the login says it was denied.
        try server.setStatus("denied", of: keyID)
        server.interceptor = nil
        let denied = await second.run(command, standardInput: "246813\n")
        #expect(denied.status == 77, "\(denied.standardError)")
        expectOneErrorLine(denied)
        #expect(denied.standardError.contains("denied"), "\(denied.standardError)")
        #expect(denied.standardError.contains("nothing is kept here"), "\(denied.standardError)")
        #expect(!denied.standardError.contains("are kept"), "\(denied.standardError)")
        #expect(try second.accounts.accountNames().isEmpty)
        #expect(!(try second.accounts.keyPairStore(for: name).hasKey))
    }

    @Test("a status this client does not know keeps a re-sent key; a 403 after the server stored a new one keeps it")
    func unknownStatusAndLaterPolicyKeep() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        // A first registration the server stores, whose login a device policy then refuses: the
        // device is active there, so the key that could revoke it stays.
        server.replaceAnswers(
            to: "POST", "/oauth/token",
            with: .oauthError(403, "access_denied", "this server's device policy refuses this device"),
            serverActsFirst: true)
        let refused = await harness.registerUnattended(server.url)
        #expect(refused.status == 77, "\(refused.standardError)")
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        let keys = try harness.accounts.keyPairStore(for: name)
        #expect(keys.hasKey)
        let keyID = try keys.loadPublicKey().fingerprint
        #expect(server.status(of: keyID) == "active")
        #expect(try harness.accounts.load(name).keyID == keyID)

        // The same key sent again, answered with a state a newer server might have.
        var account = try harness.accounts.load(name)
        account.status = .registering
        account.keyID = nil
        try harness.accounts.save(account)
        server.replaceAnswers(
            to: "POST", "/v1/devices", with: .json(200, #"{"kid":"\#(keyID)","status":"suspended"}"#),
            serverActsFirst: true)
        let unknown = await harness.registerUnattended(server.url)
        #expect(unknown.status != 0 && unknown.status != 77, "\(unknown.standardError)")
        #expect(unknown.standardError.contains("suspended"), "\(unknown.standardError)")
        #expect(try harness.accounts.keyPairStore(for: name).loadPublicKey().fingerprint == keyID)
    }

    @Test("a registration finished after a login was refused forgets the refusal, so that reset revokes")
    func refusalForgottenWhenRegistrationFinishes() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        // The answer is lost before the server stores anything; a login then records a refusal.
        server.replaceAnswers(to: "POST", "/v1/devices", with: .lost, serverActsFirst: false)
        #expect(await harness.registerUnattended(server.url).status == 69)
        server.interceptor = nil
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        var account = try harness.accounts.load(name)
        account.refusedAt = Date()
        try harness.accounts.save(account)
        let again = await harness.registerUnattended(server.url)
        #expect(again.status == 0, "\(again.standardError)")
        #expect(try harness.accounts.load(name).refusedAt == nil)
        let keyID = try #require(try harness.accounts.load(name).keyID)
        let reset = await harness.run(["reset", "--account", name, "--yes"])
        #expect(reset.status == 0, "\(reset.standardError)")
        #expect(server.status(of: keyID) == "revoked")
    }

    @Test("register again on an account whose registration was confirmed still refuses")
    func confirmedKeyRefused() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        #expect(await harness.registerUnattended(server.url).status == 0)
        let again = await harness.registerUnattended(server.url)
        #expect(again.status != 0)
        #expect(again.standardError.contains("already has a device key"))
    }

    @Test("the server stores the device and account.json cannot record it; register again finishes")
    func unrecordedRegistrationThenRegisterAgain() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        let file = try harness.accounts.accountFile(for: name)
        let saved = Mutex<Data?>(nil)
        // A non-empty directory where account.json belongs refuses the rename, as a full disk
        // refuses the new file: after the server stored the device, before the client hears so.
        server.interceptor = { request, forward in
            let answer = forward()
            if request.method == "POST" && request.path == "/v1/devices" {
                saved.withLock { $0 = FileManager.default.contents(atPath: file) }
                try? FileManager.default.removeItem(atPath: file)
                try? FileManager.default.createDirectory(atPath: file + "/full", withIntermediateDirectories: true)
            }
            return answer
        }
        let failed = await harness.registerUnattended(server.url)
        #expect(failed.status == 1, "\(failed.standardError)")
        expectOneErrorLine(failed)
        #expect(failed.standardError.contains("the server registered this device as"), "\(failed.standardError)")
        #expect(failed.standardError.contains("running the same `keyauth register` again"))
        let keys = try harness.accounts.keyPairStore(for: name)
        #expect(keys.hasKey)
        let keyID = try keys.loadPublicKey().fingerprint
        #expect(server.status(of: keyID) == "active")

        server.interceptor = nil
        try FileManager.default.removeItem(atPath: file)
        try #require(saved.withLock { $0 }).write(to: URL(fileURLWithPath: file))
        chmod(file, 0o600)
        let again = await harness.registerUnattended(server.url)
        #expect(again.status == 0, "\(again.standardError)")
        let account = try harness.accounts.load(name)
        #expect(account.status == .active)
        #expect(account.keyID == keyID)
        #expect(try harness.accounts.defaultAccountName() == name)
    }

    @Test("a registration that succeeded but cannot record the default account warns and exits 0")
    func unrecordedDefaultWarns() async throws {
        let server = try InProcessKeyAuthServer()
        let harness = CommandHarness()
        defer {
            server.stop()
            harness.home.remove()
        }
        let defaultFile = harness.home.path + "/default"
        server.interceptor = { request, forward in
            let answer = forward()
            if request.method == "POST" && request.path == "/oauth/token" {
                try? FileManager.default.createDirectory(
                    atPath: defaultFile + "/full", withIntermediateDirectories: true)
            }
            return answer
        }
        let registered = await harness.registerUnattended(server.url)
        #expect(registered.status == 0, "\(registered.standardError)")
        let name = AccountStore.defaultAccountName(user: "alice", serverURL: server.url)
        #expect(registered.standardOutput.contains("Registered this device as"))
        #expect(registered.standardError.contains("run `keyauth default \(name)`"), "\(registered.standardError)")
        server.interceptor = nil
        try FileManager.default.removeItem(atPath: defaultFile)
        #expect(await harness.run(["default", name]).status == 0)
        #expect(try harness.accounts.defaultAccountName() == name)
    }
}
