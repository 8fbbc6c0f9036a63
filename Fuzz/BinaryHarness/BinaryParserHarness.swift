import Foundation
import KeyAuth

/// Runs the parsers of binary structures that arrive from the wire, one per input, and checks
/// what each must hold: the TPM attestation's structures now, other binary formats later, each
/// a ``Mode`` chosen by the input's first byte.
///
/// The attestation parsers read bytes a client sent at registration (PROTOCOL.md section 4,
/// "Register with TPM attestation") before anything about the client is known: `TPMS_ATTEST`
/// (``TPMAttestStatement``), `TPMT_PUBLIC` (``TPMPublicArea``), the endorsement key
/// certificate chain (``TPMEndorsementRoots``, OpenSSL's DER parser, the purpose check and
/// `X509_verify_cert`), and the whole `attestation` member through ``TPMAttestationVerifier``.
/// Beyond never trapping (the process dies, which libFuzzer reports), each mode's invariants
/// are in ``check(_:)``: a refusal has one of the codes its parser documents, and an accepted
/// input satisfies the rules written out again here.
package enum BinaryParserHarness {
    /// What the bytes after the first are parsed as.
    package enum Mode: UInt8, CaseIterable, Sendable {
        /// A `TPMS_ATTEST` of `TPM2_Certify`.
        case certifyStatement = 0
        /// An RSA key's `TPMT_PUBLIC`.
        case publicArea = 1
        /// Certificates, each a 2-byte big-endian length and DER: the endorsement key's
        /// certificate, any intermediates, and last the one trusted root (with two or more).
        case endorsementChain = 2
        /// A JSON object: `public_key` (SPKI PEM), `nonce` (base64url), `roots` (base64url DER
        /// certificates), `time` (seconds) and `attestation` (the registration member).
        case attestation = 3
    }

    /// What one input did.
    package struct Outcome: Sendable {
        /// The mode its first byte chose; nil for an empty input.
        package var mode: Mode?
        /// Whether the parser (or verifier) accepted it.
        package var accepted = false
        /// For ``Mode/attestation``: whether it verified with no endorsement problem (`attested`).
        package var attested = false
        /// Broken invariants; empty when all held.
        package var violations: [String] = []
    }

    /// The fixed time that modes without one of their own verify at.
    package static let fixedTime: Int64 = 1_800_000_000

    /// Parses `input` as its first byte says (modulo the number of modes) and checks the result.
    package static func check(_ input: [UInt8]) -> Outcome {
        guard let first = input.first else { return Outcome() }
        let mode = Mode.allCases[Int(first) % Mode.allCases.count]
        let payload = Array(input.dropFirst())
        var outcome = Outcome(mode: mode)
        switch mode {
        case .certifyStatement: checkStatement(payload, &outcome)
        case .publicArea: checkPublicArea(payload, &outcome)
        case .endorsementChain: checkChain(payload, &outcome)
        case .attestation: checkAttestation(payload, &outcome)
        }
        return outcome
    }

    /// An input of `mode` with `payload`, as the seeds are written.
    package static func input(_ mode: Mode, _ payload: [UInt8]) -> [UInt8] {
        [mode.rawValue] + payload
    }

    /// The payload of ``Mode/endorsementChain``: each certificate with its length.
    package static func chainPayload(_ certificates: [[UInt8]]) -> [UInt8] {
        certificates.flatMap { [UInt8(truncatingIfNeeded: $0.count >> 8), UInt8(truncatingIfNeeded: $0.count)] + $0 }
    }

    /// The payload of ``Mode/attestation``.
    package static func attestationPayload(
        publicKey: RSAPublicKey, nonce: [UInt8], roots: [[UInt8]], time: Int64, attestation: TPMAttestation
    ) -> [UInt8] {
        let member = RegistrationAttestation(nonce: Base64URL.encode(nonce), evidence: attestation).jsonValue
        return JSONValue.object([
            "public_key": .string(publicKey.pemRepresentation), "nonce": .string(Base64URL.encode(nonce)),
            "roots": .array(roots.map { .string(Base64URL.encode($0)) }), "time": .integer(time),
            "attestation": member,
        ]).serializedBytes(leadingKeys: ["public_key", "nonce", "roots", "time"])
    }

    private static func checkStatement(_ bytes: [UInt8], _ outcome: inout Outcome) {
        do {
            let statement = try TPMAttestStatement(bytes)
            outcome.accepted = true
            // The layout again: magic, type, five sized or fixed fields, nothing after.
            let expected =
                4 + 2 + 2 + statement.qualifiedSigner.count + 2 + statement.extraData.count + 17 + 8 + 2
                + statement.certifiedName.count
            let qualifiedNameLength = bytes.count - expected - 2
            if statement.magic != TPMAttestStatement.generatedValue || statement.type != TPMAttestStatement.certifyType
            {
                outcome.violations.append("a statement of another magic or type was accepted")
            }
            if statement.extraData.count > 64 || statement.certifiedName.count > 66
                || statement.qualifiedSigner.count > 66 || !(0...66).contains(qualifiedNameLength)
            {
                outcome.violations.append("a statement with an oversized field or trailing bytes was accepted")
            }
        } catch {
            if ![.malformed, .notCertify].contains(error.code) {
                outcome.violations.append("the statement parser refused with \(error.code)")
            }
        }
    }

    private static func checkPublicArea(_ bytes: [UInt8], _ outcome: inout Outcome) {
        do {
            let area = try TPMPublicArea(bytes, structure: "the fuzzed area")
            outcome.accepted = true
            if area.bytes != bytes { outcome.violations.append("the area does not keep the bytes it parsed") }
            if area.modulus.count < 256 || area.modulus.count > 512 {
                outcome.violations.append("an area with a modulus of \(area.modulus.count) bytes was accepted")
            }
            if let name = try? area.name(), name.count != 34 || name.prefix(2) != [0x00, 0x0B] {
                outcome.violations.append("a name is not 0x000B and a SHA-256 digest")
            }
            if let key = try? area.publicKey(), key.bits != area.modulus.count * 8 {
                outcome.violations.append("the public key's size is not the modulus's")
            }
        } catch {
            if error.code != .malformed { outcome.violations.append("the area parser refused with \(error.code)") }
        }
    }

    /// Splits a chain payload; nil when a length runs past the end.
    static func certificates(in payload: [UInt8]) -> [[UInt8]]? {
        var rest = payload[...]
        var found: [[UInt8]] = []
        while !rest.isEmpty {
            guard rest.count >= 2 else { return nil }
            let length = Int(rest[rest.startIndex]) << 8 | Int(rest[rest.startIndex + 1])
            rest = rest.dropFirst(2)
            guard rest.count >= length else { return nil }
            found.append(Array(rest.prefix(length)))
            rest = rest.dropFirst(length)
        }
        return found
    }

    private static func checkChain(_ payload: [UInt8], _ outcome: inout Outcome) {
        guard var chain = certificates(in: payload), !chain.isEmpty else { return }
        let roots = chain.count >= 2 ? [chain.removeLast()] : []
        do {
            let (key, problem) = try TPMEndorsementRoots(certificates: roots).verify(chain: chain, at: fixedTime)
            outcome.accepted = true
            if problem == nil, roots.isEmpty { outcome.violations.append("a chain verified without a root") }
            if key.bits < 512 { outcome.violations.append("a certificate's key of \(key.bits) bits was returned") }
        } catch {
            if error.code != .endorsementKey { outcome.violations.append("the chain was refused with \(error.code)") }
        }
    }

    private static func checkAttestation(_ payload: [UInt8], _ outcome: inout Outcome) {
        guard let object = try? JSONValue(parsing: payload).objectValue,
            let pem = object["public_key"]?.stringValue,
            let key = try? RSAPublicKey(pemRepresentation: Array(pem.utf8)),
            let nonce = object["nonce"]?.stringValue.flatMap(Base64URL.decode),
            let member = object["attestation"]
        else { return }
        let roots = (object["roots"]?.arrayValue ?? []).compactMap { $0.stringValue.flatMap(Base64URL.decode) }
        let time = object["time"]?.integerValue ?? fixedTime
        let attestation: RegistrationAttestation
        do {
            attestation = try RegistrationAttestation(jsonValue: member)
        } catch {
            return  // A wire format error, which names the field: the refusal this layer has.
        }
        do {
            let verified = try TPMAttestationVerifier(roots: TPMEndorsementRoots(certificates: roots)).verify(
                attestation.evidence, key: key, nonce: nonce, at: time)
            outcome.accepted = true
            outcome.attested = verified.endorsementProblem == nil
            // The links again, from the parts: the statement carries the nonce and names the
            // registered key, and the key's attributes bind it to its TPM.
            let statement = try TPMAttestStatement(attestation.evidence.certifyInfo)
            let area = try TPMPublicArea(attestation.evidence.keyPublicArea, structure: "the key")
            if statement.extraData != nonce { outcome.violations.append("an attestation for another nonce verified") }
            if try area.name() != statement.certifiedName || area.publicKey() != key {
                outcome.violations.append("an attestation of another key verified")
            }
            if !area.attributes.isSuperset(of: [.fixedTPM, .fixedParent, .sensitiveDataOrigin]) {
                outcome.violations.append("a key that can leave its TPM verified")
            }
            if outcome.attested, roots.isEmpty || attestation.evidence.endorsementCertificates.isEmpty {
                outcome.violations.append("an attestation was attested without a root and a certificate")
            }
            if verified.endorsementKey.bits != 2048 { outcome.violations.append("an EK of another size verified") }
        } catch {
            // A TPMAttestationError (the only type these throw): every code is a documented refusal.
        }
    }
}
