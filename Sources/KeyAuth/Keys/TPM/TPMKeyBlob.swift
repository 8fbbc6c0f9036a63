internal import CKeyAuthOpenSSL
internal import CKeyAuthTSS2

/// The contents of a `TSS2 PRIVATE KEY` file, read without a TPM.
///
/// The file is the TPM 2.0 key file format that tpm2-openssl and tpm2-tss-engine write:
///
///     TPMKey ::= SEQUENCE {
///         type        OBJECT IDENTIFIER,        -- 2.23.133.10.1.3, a loadable key
///         emptyAuth   [0] EXPLICIT BOOLEAN OPTIONAL,
///         ...         [1]..[n] OPTIONAL,        -- policies, secrets: not used by keyauth
///         parent      INTEGER,                  -- 0x40000001: a primary key of the owner
///         pubkey      OCTET STRING,             -- TPM2B_PUBLIC
///         privkey     OCTET STRING }            -- TPM2B_PRIVATE, encrypted by the parent
///
/// Only the public half is read (with the TPM stack's own unmarshalling), so that the public key,
/// and the attributes that keep the key inside the TPM, are known before a TPM is reached.
struct TPMKeyBlob {
    /// The PEM label.
    static let pemLabel = "TSS2 PRIVATE KEY"
    /// Whether the key was created with an empty authorization value (no PIN).
    let hasEmptyAuthorization: Bool
    /// The parent handle.
    let parent: UInt32
    /// The RSA modulus, big-endian.
    let modulus: [UInt8]
    /// The RSA public exponent, big-endian.
    let exponent: [UInt8]
    /// `fixedTPM` and `fixedParent`: the TPM refuses to duplicate the key to anywhere else.
    let isFixedToTPM: Bool
    /// Not `noDA`: wrong authorization values count toward the TPM's lockout.
    let isProtectedFromDictionaryAttacks: Bool
    /// `sensitiveDataOrigin`: the TPM generated the private key; nobody ever held it outside.
    let wasGeneratedInTPM: Bool
    /// The key's `TPM2B_PUBLIC` as stored, for loading it with the TPM stack.
    let publicPart: [UInt8]
    /// The key's `TPM2B_PRIVATE` as stored: encrypted by the parent, readable only by this TPM.
    let privatePart: [UInt8]
    /// The whole DER, and the offsets of the outer SEQUENCE's contents and of the `privkey`
    /// field (its last), so that ``replacingPrivatePart(with:)`` keeps everything before it.
    private let der: [UInt8]
    private let contentsStart: Int
    private let privateFieldStart: Int

    /// - Throws: `.keyCorrupt` for anything but an RSA `TSS2 PRIVATE KEY`.
    init(pem: [UInt8]) throws(KeyAuthError) {
        let der = try Self.decodePEM(pem)
        var outer = DERReader(der)
        guard var key = outer.read(tag: 0x30), outer.isAtEnd else { throw Self.corrupt("not a DER SEQUENCE") }
        contentsStart = key.bytes.startIndex
        guard key.read(tag: 0x06) == DERReader(Self.loadableKeyOID) else {
            throw Self.corrupt("not a loadable TPM key (OID 2.23.133.10.1.3)")
        }
        var emptyAuth = false
        while let tag = key.peekTag, tag & 0xE0 == 0xA0 {
            guard var field = key.read(tag: tag) else { throw Self.corrupt("a truncated optional field") }
            if tag == 0xA0 {
                guard let flag = field.read(tag: 0x01), flag.bytes.count == 1, let value = flag.bytes.first else {
                    throw Self.corrupt("emptyAuth is not a BOOLEAN")
                }
                emptyAuth = value != 0
            }
        }
        guard let parent = key.read(tag: 0x02), (1...5).contains(parent.bytes.count),
            let publicPart = key.read(tag: 0x04)
        else { throw Self.corrupt("the parent, public or private part is missing") }
        privateFieldStart = key.bytes.startIndex
        guard let privatePart = key.read(tag: 0x04), key.isAtEnd else {
            throw Self.corrupt("the parent, public or private part is missing")
        }
        self.der = der
        self.hasEmptyAuthorization = emptyAuth
        self.publicPart = Array(publicPart.bytes)
        self.privatePart = Array(privatePart.bytes)
        self.parent = parent.bytes.reduce(0) { ($0 << 8) | UInt32($1) }

        var offset = 0
        var unmarshalled = TPM2B_PUBLIC()
        let status = publicPart.bytes.withUnsafeBufferPointer {
            Tss2_MU_TPM2B_PUBLIC_Unmarshal($0.baseAddress, $0.count, &offset, &unmarshalled)
        }
        guard status == 0, offset == publicPart.bytes.count else { throw Self.corrupt("the public part is malformed") }
        let area = unmarshalled.publicArea
        guard area.type == TPM2_ALG_RSA else { throw Self.corrupt("the key is not an RSA key") }
        guard let (modulus, exponent) = Self.rsaNumbers(of: area) else {
            throw Self.corrupt("the modulus does not match the key size")
        }
        self.modulus = modulus
        self.exponent = exponent
        let attributes = area.objectAttributes
        isFixedToTPM = attributes & TPMA_OBJECT_FIXEDTPM != 0 && attributes & TPMA_OBJECT_FIXEDPARENT != 0
        isProtectedFromDictionaryAttacks = attributes & TPMA_OBJECT_NODA == 0
        wasGeneratedInTPM = attributes & TPMA_OBJECT_SENSITIVEDATAORIGIN != 0
    }

    /// The same key file with another `TPM2B_PRIVATE`, as PEM: what `TPM2_ObjectChangeAuth`
    /// gives for a new authorization value.
    ///
    /// Every field before `privkey` keeps its bytes (the type, `emptyAuth`, any optional field,
    /// the parent and the public part), so tpm2-openssl reads the new file exactly as it read the
    /// old one, under the same parent and with the same public key.
    func replacingPrivatePart(with privatePart: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        let contents = Array(der[contentsStart..<privateFieldStart]) + DERWriter.item(tag: 0x04, privatePart)
        let replaced = DERWriter.item(tag: 0x30, contents)
        return try OpenSSL.collectBIO("the TPM key") { bio in
            PEM_write_bio(bio, Self.pemLabel, "", replaced, replaced.count) > 0 ? 1 : 0
        }
    }

    /// The modulus and exponent of an RSA public area, big-endian without leading zeros; nil when
    /// the modulus does not have the size the area declares.
    static func rsaNumbers(of area: TPMT_PUBLIC) -> (modulus: [UInt8], exponent: [UInt8])? {
        let detail = area.parameters.rsaDetail
        let modulusSize = Int(area.unique.rsa.size)
        guard area.type == TPM2_ALG_RSA, modulusSize > 0, modulusSize * 8 == Int(detail.keyBits) else { return nil }
        let modulus = withUnsafeBytes(of: area.unique.rsa.buffer) { Array($0.prefix(modulusSize)) }
        // An exponent of 0 means the default, 65537 (TPM 2.0 Part 2, TPMS_RSA_PARMS).
        let exponent = detail.exponent == 0 ? 65537 : detail.exponent
        return (Array(modulus.drop { $0 == 0 }), withUnsafeBytes(of: exponent.bigEndian) { Array($0.drop { $0 == 0 }) })
    }

    /// 2.23.133.10.1.3, DER-encoded without tag and length.
    private static let loadableKeyOID: [UInt8] = [0x67, 0x81, 0x05, 0x0A, 0x01, 0x03]

    private static func corrupt(_ reason: String) -> KeyAuthError {
        KeyAuthError(.keyCorrupt, "not a TPM key (\(pemLabel)): \(reason)")
    }

    /// The DER inside a `TSS2 PRIVATE KEY` PEM.
    private static func decodePEM(_ pem: [UInt8]) throws(KeyAuthError) -> [UInt8] {
        try OpenSSL.withReadBIO(pem) { bio throws(KeyAuthError) in
            var name: UnsafeMutablePointer<CChar>? = nil
            var header: UnsafeMutablePointer<CChar>? = nil
            var data: UnsafeMutablePointer<UInt8>? = nil
            var length = 0
            guard PEM_read_bio(bio, &name, &header, &data, &length) == 1, let name, let data else {
                OpenSSL.clearErrors()
                throw corrupt("not PEM")
            }
            defer {
                ckeyauth_OPENSSL_free(name)
                ckeyauth_OPENSSL_free(header)
                ckeyauth_OPENSSL_free(data)
            }
            guard String(cString: name) == pemLabel else { throw corrupt("the PEM label is \(String(cString: name))") }
            return Array(UnsafeBufferPointer(start: data, count: length))
        }
    }
}

/// Writes DER tag-length-value items, for the key file format's fields.
enum DERWriter {
    /// `tag`, the definite length of `contents` (short form below 128, long form above), then
    /// `contents`.
    static func item(tag: UInt8, _ contents: [UInt8]) -> [UInt8] {
        guard contents.count >= 0x80 else { return [tag, UInt8(contents.count)] + contents }
        let length = withUnsafeBytes(of: UInt64(contents.count).bigEndian) { Array($0.drop { $0 == 0 }) }
        return [tag, 0x80 | UInt8(length.count)] + length + contents
    }
}

/// Reads DER tag-length-value items, definite lengths only, as the key file format requires.
struct DERReader: Equatable {
    /// The bytes not yet read (for a value, its contents).
    private(set) var bytes: ArraySlice<UInt8>

    init(_ bytes: [UInt8]) {
        self.bytes = bytes[...]
    }

    private init(slice: ArraySlice<UInt8>) {
        self.bytes = slice
    }

    var isAtEnd: Bool { bytes.isEmpty }

    /// The tag of the next item, if any.
    var peekTag: UInt8? { bytes.first }

    /// Reads the next item when its tag is `tag`, returning a reader over its contents.
    mutating func read(tag: UInt8) -> DERReader? {
        guard bytes.count >= 2, bytes[bytes.startIndex] == tag else { return nil }
        var index = bytes.startIndex + 1
        var length = Int(bytes[index])
        index += 1
        if length & 0x80 != 0 {
            let count = length & 0x7F
            guard (1...3).contains(count), bytes.endIndex - index >= count else { return nil }
            length = bytes[index..<(index + count)].reduce(0) { ($0 << 8) | Int($1) }
            index += count
        }
        guard bytes.endIndex - index >= length else { return nil }
        let value = bytes[index..<(index + length)]
        bytes = bytes[(index + length)...]
        return DERReader(slice: value)
    }

    static func == (lhs: DERReader, rhs: DERReader) -> Bool {
        lhs.bytes.elementsEqual(rhs.bytes)
    }
}
