import Foundation
import KeyAuth
import KeyAuthServer
import KeyAuthTestSupport
import Testing

/// `--device-policy` and `--device-policy-mode`: which tiers may register and log in, and what
/// monitor mode reports instead of refusing.
@Suite("Device policy", .timeLimit(.minutes(10)))
struct DevicePolicyTests {
    /// A responder on `environment`'s database with `policy`, trusting `roots`, logging to `log`.
    private func api(
        _ environment: TestEnvironment, _ policy: DevicePolicy, roots: TPMEndorsementRoots = .none,
        log: CapturingLog = CapturingLog(), sshCAKeyFile: String? = nil
    ) throws -> (TestAPI, KeyAuthResponder) {
        let storage = try environment.openStorage()
        let configuration = try environment.configuration { configuration in
            configuration.devicePolicy = policy
            configuration.tpmRoots = roots
            configuration.sshCAKeyFile = sshCAKeyFile
        }
        let responder = try KeyAuthResponder(
            configuration: configuration, issuer: TestEnvironment.issuer, storage: storage, log: log,
            now: environment.clock.closure)
        let api = TestAPI(
            transport: DirectTransport(responder: responder), issuer: TestEnvironment.issuer, clock: environment.clock,
            storage: storage)
        return (api, responder)
    }

    private func metrics(_ responder: KeyAuthResponder) -> String {
        responder.operations.respond(to: HTTPRequest(method: "GET", path: "/metrics")).text
    }

    @Test("a policy admits the tiers at or above it")
    func levels() {
        let tiers: [DeviceTier] = [.software, .tpmUnverified, .attested, DeviceTier(rawValue: "future")]
        #expect(tiers.map(DevicePolicy(level: .any).admits) == [true, true, true, true])
        #expect(tiers.map(DevicePolicy(level: .tpm).admits) == [false, true, true, false])
        #expect(tiers.map(DevicePolicy(level: .attested).admits) == [false, false, true, false])
    }

    @Test("under attested + enforce a key file and an unverified TPM cannot register; an attested TPM can")
    func enforcedAtRegistration() throws {
        let tpm = try SoftwareTPM(endorsementCertificates: true)
        defer { withExtendedLifetime(tpm) {} }
        let environment = TestEnvironment(clockStart: Int64(Date().timeIntervalSince1970))
        let policy = DevicePolicy(level: .attested, mode: .enforce)
        let (plain, plainResponder) = try api(environment, policy)

        let file = try plain.register(user: "alice", key: try ServerTestKeys.key("alice-1"))
        #expect(file.status == 403)
        #expect(file.errorCode == "access_denied")
        #expect(
            file.errorDescription
                == "this server's device policy (attested) refuses the registration of this device: its tier is "
                + "software, and the policy needs a key in a TPM whose maker this server trusts (tier attested); "
                + "register this machine again with `keyauth register --key-store tpm`, on a machine whose TPM "
                + "has an endorsement key certificate")
        let key = try TPMKey.generate(bits: 2048, on: try tpm.connection)
        let unverified = try AttestedClient(api: plain, tpm: tpm, key: key).register(user: "alice")
        #expect(unverified.challenge.status == 202, "the attestation itself is fine")
        #expect(unverified.final.status == 403)
        #expect(unverified.final.errorDescription?.contains("its tier is tpm-unverified") == true)
        #expect(try plain.storage.allDevices().isEmpty)
        #expect(
            metrics(plainResponder).contains(
                "keyauth_device_policy_refusals_total{at=\"registration\",mode=\"enforce\"} 2"))

        let roots = try TPMEndorsementRoots.load(path: try #require(tpm.endorsementCA?.path) + "/issuercert.pem")
        let rootFile = try TPMEndorsementRoots.load(
            path: try #require(tpm.endorsementRootCertificatePath))
        let (trusting, _) = try api(
            environment, policy, roots: TPMEndorsementRoots(certificates: roots.certificates + rootFile.certificates))
        let attested = try AttestedClient(api: trusting, tpm: tpm, key: key).register(user: "alice")
        #expect(attested.final.status == 201, "\(attested.final.text)")
        #expect(attested.final.json?["tier"]?.stringValue == "attested")
        #expect(
            try trusting.login(assertion: try AttestedClient(api: trusting, tpm: tpm, key: key).proof()).status == 200)
    }

    @Test("a registration the policy refuses uses up its proof: the proof cannot log in the device it names")
    func refusedRegistrationProofUsedUp() throws {
        let environment = TestEnvironment()
        let (open, _) = try api(environment, DevicePolicy(level: .any, mode: .enforce))
        let key = try ServerTestKeys.key("alice-1")
        #expect(try open.register(user: "alice", key: key).status == 201)
        // The device is attested (as a TPM attestation would have recorded), so it passes the
        // policy at login; sent again without an attestation, its registration does not.
        #expect(try open.storage.raiseTier(kid: key.publicKey.fingerprint, from: .software, to: .attested))
        let (strict, _) = try api(environment, DevicePolicy(level: .attested, mode: .enforce))
        let proof = try strict.assertion(key)
        let again = try strict.register(user: "alice", key: key, proof: proof)
        #expect(again.status == 403 && again.errorCode == "access_denied")
        let replayed = try strict.login(assertion: proof)
        #expect(replayed.status == 400 && replayed.errorCode == "invalid_grant", "\(replayed.text)")
        #expect(try strict.login(key).status == 200, "a fresh assertion of the attested device logs in")
    }

    @Test("a device below a new policy is refused at login under enforce, and let in and counted under monitor")
    func loginAndMonitor() throws {
        let environment = TestEnvironment()
        let key = try ServerTestKeys.key("alice-1")
        let (open, _) = try api(environment, DevicePolicy())
        #expect(try open.register(user: "alice", key: key).status == 201)
        #expect(try open.login(key).status == 200)

        let (enforced, _) = try api(environment, DevicePolicy(level: .tpm, mode: .enforce))
        let refused = try enforced.login(key)
        #expect(refused.status == 403)
        #expect(refused.errorCode == "access_denied")
        #expect(refused.errorDescription?.hasPrefix("this server's device policy (tpm) refuses the login") == true)
        #expect(refused.errorDescription?.contains("keyauth register --key-store tpm") == true)
        #expect(refused.errorDescription?.contains("run `keyauth attest` if the key is in a TPM") == true)
        // Whole in a client, which shows at most 300 characters of a description.
        let longest = DevicePolicy(level: .attested).refusal(of: .tpmUnverified, at: "login")
        #expect(longest.count <= 300, "\(longest.count): \(longest)")

        let log = CapturingLog()
        let (monitored, responder) = try api(environment, DevicePolicy(level: .attested, mode: .monitor), log: log)
        #expect(try monitored.login(key).status == 200)
        #expect(try monitored.register(user: "bob", key: try ServerTestKeys.key("alice-2")).status == 201)
        let text = metrics(responder)
        #expect(text.contains("keyauth_device_policy_refusals_total{at=\"login\",mode=\"monitor\"} 1"))
        #expect(text.contains("keyauth_device_policy_refusals_total{at=\"registration\",mode=\"monitor\"} 1"))
        let kid = key.publicKey.fingerprint
        #expect(
            log.lines.contains {
                $0.contains(
                    "device policy attested (monitor) would refuse the login of device \(kid) of alice: tier software")
            }, "\(log.lines)")
    }

    @Test("an access token from before a stricter policy gets no SSH certificate under enforce")
    func sshCertificateUnderPolicy() throws {
        let environment = TestEnvironment(clockStart: ServerClock.now())
        let caFile = environment.directory.path + "/ssh-ca.key"
        try SSHCertificateAuthority.generate(.ed25519).write(to: caFile)
        let key = try ServerTestKeys.key("alice-1")
        let (open, _) = try api(environment, DevicePolicy(), sshCAKeyFile: caFile)
        let token = try open.activeDevice(user: "alice", key: key)
        #expect(try open.authorized("POST", "/v1/ssh/certificates", token: token).status == 201)

        let (enforced, responder) = try api(
            environment, DevicePolicy(level: .tpm, mode: .enforce), sshCAKeyFile: caFile)
        let refused = try enforced.authorized("POST", "/v1/ssh/certificates", token: token)
        #expect(refused.status == 403 && refused.errorCode == "access_denied", "\(refused.text)")
        #expect(refused.errorDescription?.contains("refuses the SSH certificate") == true, "\(refused.text)")
        #expect(refused.errorDescription?.contains("run `keyauth attest` if the key is in a TPM") == true)
        let longest = DevicePolicy(level: .attested).refusal(of: .tpmUnverified, at: "ssh-certificate")
        #expect(longest.count <= 300, "\(longest.count): \(longest)")
        let counted = "keyauth_device_policy_refusals_total{at=\"ssh-certificate\",mode=\"enforce\"} 1"
        #expect(metrics(responder).contains(counted))
    }
}
