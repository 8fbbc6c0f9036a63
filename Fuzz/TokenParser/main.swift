// libFuzzer entry point for the token parser and its helpers.
//
// Built by `Fuzz/run.sh` in one module with the KeyAuth library sources (so the claim checks,
// which are internal, can be reached without a valid signature) and `-parse-as-library`:
// libFuzzer supplies `main`.
//
// Every input is used five ways:
// 1. as base64url text: a strict decode must re-encode to the same text (canonical encoding),
//    and any bytes must survive encode then decode;
// 2. as JSON text: a value that parses must serialize, re-parse to an equal value and serialize
//    to the same text again; a JSON object is also run through the claim checks on a fixed clock;
// 3. as a token: `CompactJWS(parsing:)`, `claims()` and `JWTVerifier` with a fixed clock and a
//    `SingleKeyResolver` over a fixed public key, which must never accept (nobody holds the
//    private key);
// 4. split at its first NUL byte into header and payload JSON, base64url-encoded into a token
//    with a fixed signature, so that mutations reach the header and claim rules without first
//    having to produce valid base64url; the parser's verdict is compared with the rules of
//    PROTOCOL.md section 2;
// 5. its first 16 bytes as raw `exp` and `iat` integers for the time rules.
//
// Set KEYAUTH_FUZZ_SKIP_KNOWN=all (or a comma-separated list of finding names) to step around
// the findings listed in Fuzz/README.md, so that a long run can look for new ones before those
// are fixed.

import Foundation

/// The verifier's clock: fixed, so a crash reproduces on any day.
private let fuzzNow: Int64 = 1_800_000_000

/// The audience the verifier requires.
private let fuzzAudience = "https://keyauth.fuzz"

/// An RSA-2048 public key made with `openssl genpkey` for this target; its private key was
/// deleted right away, so no input can carry a valid signature.
private let fuzzPublicKeyPEM = """
    -----BEGIN PUBLIC KEY-----
    MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAmG7lp7IZ5xinerEzaP9Y
    X3UFSn4ecMdblFZsZBTs6+V6hTEpNI24B4j687vNc+dxkL61kXXs8Mi3GPuc4+dC
    3s6vyuwKju5il00ONDyzW64yr2jqDHS/byzXxzAygJzzmB6CGM7fKmKXFxK/xnqI
    ALuVJK9y/i7E4MD78iGeaz0koZEKtT0TiV8ZMKg+2dd1NWXdBT55Tz+ekhIzZ2vq
    AJe9wVZYV1YHrC7JxYx+MYVaxxfkscWyu+Fljn3sV5Q1pNYvx0J3r6o4yHdeI8jJ
    D5asV2JhGY7RQKiwfA81yrywns9RRKgxmBjKvOwf68I05PLN6I8mMaG2PJ/yUGn6
    mQIDAQAB
    -----END PUBLIC KEY-----

    """

/// The RFC 7638 thumbprint of that key, computed independently (Python `hashlib`), so that the
/// library's fingerprint is checked too.
private let fuzzKeyID = "BqMHq2FLV1rmSVj9LkMYzKbvLZvMtcOjOKeswRllbPA"

private let fuzzKey: RSAPublicKey = {
    do {
        let key = try RSAPublicKey(pemRepresentation: Array(fuzzPublicKeyPEM.utf8))
        invariant(key.fingerprint == fuzzKeyID, "the fingerprint of the embedded key changed")
        return key
    } catch {
        fatalError("the embedded public key does not load: \(error)")
    }
}()

/// The claim rules of device assertions, as the preset applies them.
private let fuzzVerifier = JWTVerifier(
    rules: JWTVerifier.Rules(audience: fuzzAudience), clock: .fixed(seconds: fuzzNow))

/// The public preset, through its two steps.
private let fuzzAssertions = DeviceAssertionVerifier(audience: fuzzAudience, clock: .fixed(seconds: fuzzNow))

/// A signature-sized block that is not a signature of anything.
private let fuzzSignature = [UInt8](repeating: 0x5A, count: 256)

/// The findings of Fuzz/README.md to step around: `KEYAUTH_FUZZ_SKIP_KNOWN` is a comma-separated
/// list of their names, or `all`.
private let skippedFindings: Set<Substring> = {
    let names = Set((ProcessInfo.processInfo.environment["KEYAUTH_FUZZ_SKIP_KNOWN"] ?? "").split(separator: ","))
    return names.contains("all") ? ["json-number", "lifetime-overflow"] : names
}()

/// Stops the run with a message when an invariant does not hold.
///
/// `fatalError` rather than `precondition`, because `-O` drops a precondition's message and the
/// message is what tells a finding apart from the next one.
private func invariant(_ condition: Bool, _ message: @autoclosure () -> String) {
    if !condition { fatalError("invariant violated: \(message())") }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTokenParser(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    checkBase64URL(bytes)
    checkJSON(bytes)
    checkToken(String(decoding: bytes, as: UTF8.self))
    if let separator = bytes.firstIndex(of: 0) {
        checkAssembledToken(header: Array(bytes[..<separator]), payload: Array(bytes[(separator + 1)...]))
    }
    if bytes.count >= 16 {
        checkTimeArithmetic(bytes)
    }
    return 0
}

// MARK: - Base64URL

private func checkBase64URL(_ bytes: [UInt8]) {
    if let decoded = Base64URL.decode(utf8: bytes) {
        invariant(Array(Base64URL.encode(decoded).utf8) == bytes, "base64url accepted a non-canonical encoding")
    }
    let encoded = Base64URL.encode(bytes)
    invariant(Base64URL.decode(encoded) == bytes, "base64url does not decode its own encoding")
    invariant(encoded.utf8.count == (bytes.count * 4 + 2) / 3, "base64url output has the wrong length")
}

// MARK: - JSON

private func checkJSON(_ bytes: [UInt8]) {
    guard let value = try? JSONValue(parsing: bytes) else { return }
    let text = value.serialized()
    let reparsed: JSONValue
    do {
        reparsed = try JSONValue(parsing: Array(text.utf8))
    } catch {
        fatalError("invariant violated: serialized JSON does not parse (\(error.reason) at \(error.offset))")
    }
    if !(skippedFindings.contains("json-number") && containsIntegralNumber(value)) {
        invariant(reparsed == value, "JSON changed in a serialize and parse round trip")
    }
    invariant(reparsed.serialized() == text, "JSON serialization is not stable")
    if let claims = value.objectValue {
        checkClaimRules(claims)
    }
}

/// Known finding `json-number`: a `.number` with an integral value below 1e15 serializes as an integer.
private func containsIntegralNumber(_ value: JSONValue) -> Bool {
    switch value {
    case .number(let number): return number == number.rounded() && abs(number) < 1e15
    case .array(let elements): return elements.contains(where: containsIntegralNumber)
    case .object(let members): return members.values.contains(where: containsIntegralNumber)
    default: return false
    }
}

/// Known finding `lifetime-overflow`: `exp - iat` overflows in `checkTimes` when both are extreme.
private func hasOverflowingLifetime(_ claims: [String: JSONValue]) -> Bool {
    guard let expiresAt = claims["exp"]?.integerValue, let issuedAt = claims["iat"]?.integerValue else {
        return false
    }
    return expiresAt.subtractingReportingOverflow(issuedAt).overflow
}

/// Runs the claim rules as if the signature had verified: in the server a registration proof is
/// signed by a key the client brings, so every claim value is attacker-chosen.
private func checkClaimRules(_ claims: [String: JSONValue]) {
    if skippedFindings.contains("lifetime-overflow") && hasOverflowingLifetime(claims) { return }
    // The time rules alone first: the full check reaches them only past sub, iss and aud.
    do {
        try fuzzVerifier.checkTimes(claims: JWTClaims(claims))
    } catch {
        invariant(error.code == .claimInvalid, "a time check failed with \(error.code)")
    }
    let keyID = claims["sub"]?.stringValue ?? fuzzKeyID
    do {
        try fuzzVerifier.checkClaims(JWTClaims(claims), keyID: keyID)
        // Accepted: then every rule of PROTOCOL.md section 2 must hold.
        invariant(claims["sub"]?.stringValue == keyID && claims["iss"]?.stringValue == keyID, "sub/iss accepted")
        guard let expiresAt = claims["exp"]?.integerValue, let issuedAt = claims["iat"]?.integerValue else {
            fatalError("invariant violated: claims without integer exp and iat accepted")
        }
        invariant(expiresAt > fuzzNow - 10 && issuedAt <= fuzzNow + 10, "an expired or future token accepted")
        invariant(expiresAt - issuedAt <= 300, "a token living longer than 300 s accepted")
        invariant(!(claims["jti"]?.stringValue ?? "").isEmpty, "a token without jti accepted")
    } catch {
        invariant(error.code == .claimInvalid, "a claim check failed with \(error.code)")
    }
}

/// Reads `exp` and `iat` as raw 64-bit integers from the first 16 bytes: extremes that JSON text
/// reaches only by long runs of digit mutations are one mutation away here.
private func checkTimeArithmetic(_ bytes: [UInt8]) {
    func integer(at offset: Int) -> Int64 {
        bytes[offset..<(offset + 8)].reversed().reduce(0) { $0 << 8 | Int64($1) }
    }
    checkClaimRules(["exp": .integer(integer(at: 0)), "iat": .integer(integer(at: 8))])
}

// MARK: - Tokens

private func checkToken(_ token: String) {
    let bytes = Array(token.utf8)
    let jws: CompactJWS
    do {
        jws = try CompactJWS(parsing: token)
    } catch {
        invariant(error.code == .tokenMalformed || error.code == .claimInvalid, "parse failed with \(error.code)")
        checkVerifierRefuses(token)
        return
    }
    invariant(bytes.count <= CompactJWS.maximumLength, "an oversized token parsed")
    let dots = bytes.indices.filter { bytes[$0] == UInt8(ascii: ".") }
    invariant(dots.count == 2, "a token without exactly two dots parsed")
    invariant(jws.signingInput == Array(bytes[..<dots[1]]), "the signing input is not the raw header.payload")
    invariant(
        Array(Base64URL.encode(jws.payload).utf8) == Array(bytes[(dots[0] + 1)..<dots[1]]),
        "the payload does not re-encode to its segment")
    invariant(
        Array(Base64URL.encode(jws.signature).utf8) == Array(bytes[(dots[1] + 1)...]),
        "the signature does not re-encode to its segment")
    invariant(jws.header["alg"] == .string("RS256"), "a header without alg RS256 parsed")
    invariant(jws.header.keys.allSatisfy { !CompactJWS.forbiddenHeaders.contains($0) }, "a forbidden header parsed")
    invariant(!jws.isSignatureValid(with: fuzzKey), "a signature by the deleted private key verified")
    if let claims = try? jws.claims() {
        checkClaimRules(claims)
    }
    checkVerifierRefuses(token)
}

private func checkVerifierRefuses(_ token: String) {
    for byPreset in [true, false] {
        do throws(KeyAuthError) {
            if byPreset {
                let assertion = try fuzzAssertions.parse(token)
                guard assertion.keyID == fuzzKeyID else { continue }
                _ = try fuzzAssertions.verify(assertion, key: fuzzKey)
            } else {
                _ = try fuzzVerifier.verify(token, key: fuzzKey)
            }
            fatalError("invariant violated: the verifier accepted a token nobody could sign")
        } catch {
            invariant(
                [.tokenMalformed, .claimInvalid, .signatureInvalid].contains(error.code),
                "the verifier failed with \(error.code)")
        }
    }
}

/// Builds `b64(header).b64(payload).b64(fixed signature)` and checks the parser's verdict
/// against the rules, written out again independently.
private func checkAssembledToken(header: [UInt8], payload: [UInt8]) {
    let token = [Base64URL.encode(header), Base64URL.encode(payload), Base64URL.encode(fuzzSignature)]
        .joined(separator: ".")
    let headerObject = (try? JSONValue(parsing: header))?.objectValue
    var expected = true
    if header.isEmpty || payload.isEmpty || token.utf8.count > CompactJWS.maximumLength { expected = false }
    if headerObject?["alg"] != .string("RS256") { expected = false }
    if let headerObject, headerObject.keys.contains(where: CompactJWS.forbiddenHeaders.contains) { expected = false }
    let jws = try? CompactJWS(parsing: token)
    invariant((jws != nil) == expected, "the parser's verdict differs from the rules (expected \(expected))")
    if let jws {
        invariant(jws.header == headerObject, "the parsed header differs from its JSON")
        invariant(jws.payload == payload, "the parsed payload differs from its bytes")
        let claims = try? jws.claims()
        invariant(claims == (try? JSONValue(parsing: payload))?.objectValue, "claims differ from the payload JSON")
    }
    checkToken(token)
}
