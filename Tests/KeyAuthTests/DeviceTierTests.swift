import KeyAuth
import Testing

/// A tier comes from a server's answer and is printed by `keyauth status` and `keyauth attest`:
/// only text with a tier name's shape is read as one.
@Suite("Tiers read from a server's answers")
struct DeviceTierTests {
    @Test("the known tiers and a newer server's tier read; text a terminal acts on does not")
    func names() {
        #expect(DeviceTier(name: "attested") == .attested)
        #expect(DeviceTier(name: "tpm-unverified") == .tpmUnverified)
        #expect(DeviceTier(name: "secure-enclave-2")?.rawValue == "secure-enclave-2")
        #expect(DeviceTier(name: "\u{1B}]52;c;aGVsbG8=\u{07}") == nil)
        #expect(DeviceTier(name: "Attested") == nil)
        #expect(DeviceTier(name: "") == nil)
        #expect(DeviceTier(name: String(repeating: "a", count: 33)) == nil)
    }

    @Test("a registration answer with such a tier has none; an attestation answer with one is refused")
    func answers() throws {
        let registration = try RegistrationResponse(
            jsonValue: .object(["kid": .string("k"), "status": .string("active"), "tier": .string("\u{1B}[2J")]))
        #expect(registration.tier == nil)
        let clean = try RegistrationResponse(
            jsonValue: .object(["kid": .string("k"), "status": .string("active"), "tier": .string("software")]))
        #expect(clean.tier == .software)

        var attestation: [String: JSONValue] = [
            "kid": .string("k"), "tier": .string("attested"), "previous_tier": .string("software"),
            "attestation_tier": .string("attested"),
        ]
        #expect(try DeviceAttestationResponse(jsonValue: .object(attestation)).tier == .attested)
        attestation["tier"] = .string("attested\u{1B}[31m")
        #expect(throws: WireFormatError.self) { try DeviceAttestationResponse(jsonValue: .object(attestation)) }
    }
}
