import Foundation

/// An OpenSSH user certificate the server issued for this device's key (PROTOCOL.md section 11).
package struct SSHCertificateGrant: Sendable, Equatable {
    /// The `-cert.pub` line: `ssh-rsa-cert-v01@openssh.com BASE64 COMMENT`.
    package var line: String
    /// The account names it may log in as.
    package var principals: [String]
    /// Seconds since 1970: the certificate is valid from `validAfter` until `validBefore`.
    package var validAfter: Int64
    package var validBefore: Int64
    /// The serial, in decimal (a 64-bit number, beyond what JSON numbers carry exactly).
    package var serial: String
}

extension KeyAuthClient {
    /// Asks for an SSH user certificate of this device's registered key
    /// (`POST /v1/ssh/certificates`); no key is sent: the server certifies the one it holds.
    ///
    /// - Throws: `.serverRejected` with `not_found` when the server is no SSH certificate
    ///   authority, `invalid_token` for an expired or revoked token; for an answer without a
    ///   certificate line of an OpenSSH certificate type, or without its validity.
    package func requestSSHCertificate(accessToken: AccessToken, proofs: DPoPProofBuilder? = nil)
        async throws(KeyAuthError) -> SSHCertificateGrant
    {
        let reply = try await send("POST", "/v1/ssh/certificates", accessToken: accessToken, proofs: proofs)
        let object = try expectObject(reply, success: [200, 201], operation: "SSH certificate")
        guard case .string(let line) = object["certificate"], Self.isCertificateLine(line),
            case .integer(let validAfter) = object["valid_after"],
            case .integer(let validBefore) = object["valid_before"],
            case .string(let serial) = object["serial"], !serial.isEmpty, serial.utf8.count <= 20,
            serial.utf8.allSatisfy({ (0x30...0x39).contains($0) }),
            case .array(let principalValues) = object["principals"]
        else {
            throw KeyAuthError(.serverRejected, "the SSH certificate answer of \(serverURL) is malformed")
        }
        let principals = principalValues.compactMap { value -> String? in
            if case .string(let text) = value { return text }
            return nil
        }
        return SSHCertificateGrant(
            line: line, principals: principals, validAfter: validAfter, validBefore: validBefore, serial: serial)
    }

    /// Whether `line` has the shape of an OpenSSH `-cert.pub` line, `TYPE BASE64 [COMMENT]`, in
    /// printable ASCII: it is printed to a terminal and written where ssh reads it, so a server
    /// cannot slip in escape sequences or more lines.
    static func isCertificateLine(_ line: String) -> Bool {
        guard line.utf8.count <= 65_536, line.utf8.allSatisfy({ (0x20...0x7E).contains($0) }) else { return false }
        let fields = line.split(separator: " ", omittingEmptySubsequences: false)
        // The blob as the agent and ssh read it (``SSHAgentProtocol/certificateBlob(line:of:)``).
        return (fields.count == 2 || fields.count == 3) && fields[0].hasSuffix("-cert-v01@openssh.com")
            && !fields[1].isEmpty && Data(base64Encoded: String(fields[1])) != nil
    }
}
