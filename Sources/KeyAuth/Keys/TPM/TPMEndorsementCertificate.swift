internal import CKeyAuthTSS2

/// A certificate for one of the TPM's endorsement keys, as its manufacturer stored it in the
/// TPM's NV memory.
///
/// The endorsement key is derived from a seed that never leaves the TPM, and its certificate,
/// signed by the TPM's manufacturer, says that a key with that public part lives in a genuine
/// TPM. Key attestation starts here: a server that trusts the manufacturer's CA can tie a device
/// key to this TPM through an attestation key that the endorsement key vouches for.
///
/// The indices are those of the TCG EK Credential Profile for TPM 2.0 (section 2.2.1.5):
/// 0x01C00002 for the RSA-2048 key and 0x01C0000A for the NIST P-256 key of the low range, and
/// 0x01C00012 to 0x01C0001E for the high range's keys (RSA-2048, P-256, P-384, P-521, SM2,
/// RSA-3072, RSA-4096). A TPM without a certificate (many firmware and virtual TPMs) has none of
/// them.
package struct TPMEndorsementCertificate: Sendable, Hashable {
    /// The NV index the certificate was read from, which tells which endorsement key it is for.
    package let nvIndex: UInt32
    /// The certificate: X.509 DER, without the padding some TPMs keep after it in the index
    /// (``withoutPadding(_:)``).
    package let der: [UInt8]

    package init(nvIndex: UInt32, der: [UInt8]) {
        self.nvIndex = nvIndex
        self.der = der
    }

    /// The indices read, in the profile's order.
    package static let nvIndices: [UInt32] =
        [0x01C0_0002, 0x01C0_000A] + stride(from: 0x01C0_0012, through: 0x01C0_001E, by: 2)

    /// `stored` without the bytes after its certificate when they are all `0x00` or all `0xFF`.
    ///
    /// An NV index has the size its maker defined, and some makers (STMicroelectronics' ST33,
    /// among others) define it larger than the certificate and fill the rest. A parser that
    /// wants exactly one certificate refuses what such a TPM stores; cut at the end of the
    /// outer DER `SEQUENCE`, it is the certificate. Anything else after it, or bytes that do
    /// not start with a `SEQUENCE` whose length fits, are returned as they are, for the
    /// certificate parser to refuse.
    package static func withoutPadding(_ stored: [UInt8]) -> [UInt8] {
        guard let length = sequenceLength(stored), length < stored.count else { return stored }
        let fill = stored[length]
        guard fill == 0x00 || fill == 0xFF, stored[length...].allSatisfy({ $0 == fill }) else { return stored }
        return Array(stored[..<length])
    }

    /// The whole length (tag, length and contents) of the DER `SEQUENCE` that `bytes` start
    /// with, from its header alone; nil when they do not start with one.
    private static func sequenceLength(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 2, bytes[0] == 0x30 else { return nil }
        let first = Int(bytes[1])
        if first < 0x80 { return 2 + first }
        // The long form: the low bits count the length's bytes. Three are 16 MiB, more than
        // any NV index holds, so more is not a certificate's header.
        let lengthBytes = first & 0x7F
        guard (1...3).contains(lengthBytes), bytes.count >= 2 + lengthBytes else { return nil }
        let length = bytes[2..<(2 + lengthBytes)].reduce(0) { $0 << 8 | Int($1) }
        return 2 + lengthBytes + length
    }
}

extension TPMConnection {
    /// Reads every endorsement key certificate stored in the TPM.
    ///
    /// - Returns: the certificates found, in the order of ``TPMEndorsementCertificate/nvIndices``;
    ///   empty for a TPM whose manufacturer stored none.
    /// - Throws: `.tpmUnavailable` naming the TCTI when no TPM answers; `.keyCorrupt` when an
    ///   index exists but cannot be read.
    package func endorsementCertificates() throws(KeyAuthError) -> [TPMEndorsementCertificate] {
        try ESAPIConnection.with(self) { tpm throws(KeyAuthError) in
            var found: [TPMEndorsementCertificate] = []
            for index in TPMEndorsementCertificate.nvIndices {
                if let stored = try tpm.readNV(index: index) {
                    found.append(
                        TPMEndorsementCertificate(
                            nvIndex: index, der: TPMEndorsementCertificate.withoutPadding(stored)))
                }
            }
            return found
        }
    }
}

extension ESAPIConnection {
    /// Reads all of an NV index's data, or nil when the TPM has no such index.
    ///
    /// Certificate indices are readable with their own empty authorization (`TPMA_NV_AUTHREAD`)
    /// and are not subject to dictionary-attack protection (`TPMA_NV_NO_DA`), so reading them
    /// never counts toward the lockout.
    func readNV(index: UInt32) throws(KeyAuthError) -> [UInt8]? {
        var object: UInt32 = 0
        let lookup = Esys_TR_FromTPMPublic(
            context, index, ESAPIConnection.noSession, ESAPIConnection.noSession, ESAPIConnection.noSession, &object)
        guard lookup == 0 else {
            // TPM_RC_HANDLE (format 1, with the handle number): no such index.
            if TPMResponseCode(lookup).layer == 0, lookup & 0x0BF == 0x08B { return nil }
            throw Self.error(lookup, doing: "look up NV index 0x\(String(index, radix: 16))", on: connection)
        }
        defer { Esys_TR_Close(context, &object) }

        var publicArea: UnsafeMutablePointer<TPM2B_NV_PUBLIC>? = nil
        var name: UnsafeMutablePointer<TPM2B_NAME>? = nil
        let described = Esys_NV_ReadPublic(
            context, object, ESAPIConnection.noSession, ESAPIConnection.noSession, ESAPIConnection.noSession,
            &publicArea, &name)
        defer {
            Esys_Free(publicArea)
            Esys_Free(name)
        }
        guard described == 0, let publicArea else {
            throw Self.error(described, doing: "describe NV index 0x\(String(index, radix: 16))", on: connection)
        }
        let size = Int(publicArea.pointee.nvPublic.dataSize)

        var data: [UInt8] = []
        while data.count < size {
            // TPM2_NV_Read returns at most TPM_PT_NV_BUFFER_MAX bytes, 512 or more on every TPM.
            let chunk = min(size - data.count, 512)
            var read: UnsafeMutablePointer<TPM2B_MAX_NV_BUFFER>? = nil
            let status = Esys_NV_Read(
                context, object, object, ESAPIConnection.passwordSession, ESAPIConnection.noSession,
                ESAPIConnection.noSession, UInt16(chunk), UInt16(data.count), &read)
            defer { Esys_Free(read) }
            guard status == 0, let read, read.pointee.size > 0 else {
                throw KeyAuthError(
                    .keyCorrupt,
                    "the TPM at \(connection.tcti) did not give the data of NV index 0x\(String(index, radix: 16))",
                    underlying: Self.error(status, doing: "read", on: connection))
            }
            let count = Int(read.pointee.size)
            data += withUnsafeBytes(of: read.pointee.buffer) { Array($0.prefix(count)) }
        }
        return data
    }

    /// `ESYS_TR_PASSWORD`: authorize with the object's authorization value in the clear.
    static let passwordSession: UInt32 = 0x0FF
}
