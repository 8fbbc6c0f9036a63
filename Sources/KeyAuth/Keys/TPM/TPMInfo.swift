internal import CKeyAuthTSS2

/// What a TPM says about itself: who made it, and the state of its dictionary-attack protection.
///
/// Every wrong PIN for a TPM key adds one to the TPM's lockout counter. When the counter reaches
/// ``maximumTries`` the TPM refuses every key that is protected against dictionary attacks (all
/// keyauth keys) until the counter drops, by one every ``lockoutInterval`` seconds while the TPM
/// is powered. These numbers belong to the TPM, not to a file, so deleting files does not reset
/// them; only the TPM's owner can, with its lockout authorization.
public struct TPMInfo: Sendable, Hashable {
    /// The manufacturer's four-letter code, such as "IBM" (swtpm), "INTC", "IFX", "STM", "MSFT".
    public let manufacturer: String
    /// The vendor string, up to 16 characters ("SW   TPM" for swtpm).
    public let vendor: String
    /// Wrong authorizations counted so far (`TPM2_PT_LOCKOUT_COUNTER`).
    public let lockoutCounter: Int
    /// Wrong authorizations that put the TPM into lockout (`TPM2_PT_MAX_AUTH_FAIL`).
    public let maximumTries: Int
    /// Seconds after which the counter drops by one (`TPM2_PT_LOCKOUT_INTERVAL`); 0 means the
    /// lockout lasts until the owner resets it.
    public let lockoutInterval: Int
    /// Seconds the lockout authorization itself stays blocked after a failure with it
    /// (`TPM2_PT_LOCKOUT_RECOVERY`).
    public let lockoutRecovery: Int
    /// Whether the TPM is refusing authorizations now (`TPMA_PERMANENT.inLockout`).
    public let isLockedOut: Bool
    /// Whether the owner hierarchy has a password (`TPMA_PERMANENT.ownerAuthSet`). keyauth makes
    /// its keys under the owner hierarchy without a password, so such a TPM cannot make them.
    public let hasOwnerPassword: Bool
    /// Which of the RSA key sizes 2048, 3072 and 4096 the TPM accepts (`TPM2_TestParms`).
    public let rsaKeySizes: [Int]

    /// Wrong PINs the TPM still accepts before it locks out.
    public var attemptsLeft: Int { max(0, maximumTries - lockoutCounter) }

    /// The largest RSA size keyauth uses for new keys on this TPM: 3072 when supported, else 2048.
    public var preferredRSAKeySize: Int { rsaKeySizes.contains(3072) ? 3072 : 2048 }

    /// Whether keyauth can make keys here: RSA-2048 at least, and no owner password.
    public var canCreateKeys: Bool { reasonKeysCannotBeCreated == nil }

    /// Why keyauth cannot make keys here, or nil when it can.
    var reasonKeysCannotBeCreated: String? {
        if hasOwnerPassword {
            return "it has an owner password, and keyauth makes its keys under the owner hierarchy without one"
        }
        if !rsaKeySizes.contains(2048) { return "it does not make RSA-2048 keys" }
        return nil
    }

    public init(
        manufacturer: String, vendor: String, lockoutCounter: Int, maximumTries: Int, lockoutInterval: Int,
        lockoutRecovery: Int, isLockedOut: Bool, hasOwnerPassword: Bool = false, rsaKeySizes: [Int]
    ) {
        self.manufacturer = manufacturer
        self.vendor = vendor
        self.lockoutCounter = lockoutCounter
        self.maximumTries = maximumTries
        self.lockoutInterval = lockoutInterval
        self.lockoutRecovery = lockoutRecovery
        self.isLockedOut = isLockedOut
        self.hasOwnerPassword = hasOwnerPassword
        self.rsaKeySizes = rsaKeySizes
    }
}

extension TPMConnection {
    /// Reads the TPM's properties.
    ///
    /// - Warning: do not call this while a `TPMProvider` of this process is open: a software
    ///   TPM serves one connection at a time, and this call would wait for the other forever.
    /// - Throws: `.tpmUnavailable` naming the TCTI when no TPM answers.
    public func info() throws(KeyAuthError) -> TPMInfo {
        try ESAPIConnection.with(self) { tpm throws(KeyAuthError) in
            let properties = try tpm.properties(from: TPMProperty.fixedGroup).merging(
                try tpm.properties(from: TPMProperty.variableGroup)
            ) { first, _ in first }
            let vendorWords = (0..<4).compactMap { properties[TPMProperty.vendorString1 + UInt32($0)] }
            return TPMInfo(
                manufacturer: TPMProperty.text(of: [properties[TPMProperty.manufacturer] ?? 0]),
                vendor: TPMProperty.text(of: vendorWords),
                lockoutCounter: Int(properties[TPMProperty.lockoutCounter] ?? 0),
                maximumTries: Int(properties[TPMProperty.maximumAuthorizationFailures] ?? 0),
                lockoutInterval: Int(properties[TPMProperty.lockoutInterval] ?? 0),
                lockoutRecovery: Int(properties[TPMProperty.lockoutRecovery] ?? 0),
                isLockedOut: (properties[TPMProperty.permanent] ?? 0) & TPMProperty.inLockout != 0,
                hasOwnerPassword: (properties[TPMProperty.permanent] ?? 0) & TPMProperty.ownerAuthSet != 0,
                rsaKeySizes: [2048, 3072, 4096].filter { tpm.acceptsRSA(bits: $0) })
        }
    }

    /// Reads the TPM's properties before a key is made on it, checking that it can make one.
    ///
    /// - Throws: `.tpmUnavailable` naming the TCTI when no TPM answers, or when it cannot make
    ///   keyauth's keys (``TPMInfo/canCreateKeys``), saying why.
    public func infoForNewKeys() throws(KeyAuthError) -> TPMInfo {
        let info = try info()
        if let reason = info.reasonKeysCannotBeCreated {
            throw KeyAuthError(.tpmUnavailable, "the TPM at \(tcti) cannot make keys: \(reason)")
        }
        return info
    }

    /// Whether this TPM signs RSASSA over SHA-512, ssh's first choice for an agent's RSA key.
    /// The TPM 2.0 PC Client profile requires SHA-256 only, and many hardware TPMs implement no
    /// SHA-512, so `keyauth ssh config` asks before it leaves ssh its default.
    ///
    /// - Throws: `.tpmUnavailable` naming the TCTI when no TPM answers.
    package func signsSHA512() throws(KeyAuthError) -> Bool {
        try ESAPIConnection.with(self) { tpm throws(KeyAuthError) in tpm.signsRSASSA(hash: TPM2_ALG_SHA512) }
    }

    /// Whether a TPM answers here: the connection opens and the TPM reports its manufacturer.
    ///
    /// Quick when nothing is there (a missing device node, a refused connection), so that
    /// choosing between the TPM and the file store costs nothing on machines without a TPM.
    public func isAvailable() -> Bool {
        (try? ESAPIConnection.with(self) { tpm throws(KeyAuthError) in
            try tpm.properties(from: TPMProperty.manufacturer, count: 1)[TPMProperty.manufacturer] != nil
        }) ?? false
    }
}

/// Property tags (TPM 2.0 Part 2, TPM_PT); tss2_tpm2_types.h spells them as nested macros that
/// Swift does not import.
enum TPMProperty {
    static let fixedGroup: UInt32 = 0x100
    static let manufacturer: UInt32 = 0x105
    static let vendorString1: UInt32 = 0x106
    static let variableGroup: UInt32 = 0x200
    static let permanent: UInt32 = 0x200
    static let lockoutCounter: UInt32 = 0x20E
    static let maximumAuthorizationFailures: UInt32 = 0x20F
    static let lockoutInterval: UInt32 = 0x210
    static let lockoutRecovery: UInt32 = 0x211
    /// `TPMA_PERMANENT.inLockout`.
    static let inLockout: UInt32 = 0x200
    /// `TPMA_PERMANENT.ownerAuthSet`.
    static let ownerAuthSet: UInt32 = 0x1

    /// Four characters per 32-bit word, big-endian, without padding spaces or NULs.
    static func text(of words: [UInt32]) -> String {
        let bytes = words.flatMap { word in (0..<4).map { UInt8(truncatingIfNeeded: word >> (24 - 8 * $0)) } }
        let printable = bytes.filter { $0 != 0 }.map { (0x20...0x7E).contains($0) ? $0 : UInt8(ascii: "?") }
        return String(decoding: printable, as: UTF8.self).trimmingSpaces()
    }
}

/// One ESAPI connection to a TPM: the TCTI the loader opened, and the ESYS context over it.
final class ESAPIConnection {
    /// The ESYS context; extensions in other files issue their own commands over it.
    let context: OpaquePointer
    private var tcti: OpaquePointer?
    let connection: TPMConnection

    private init(_ connection: TPMConnection) throws(KeyAuthError) {
        TPMStack.quietLogging()
        var tcti: OpaquePointer? = nil
        let loaded = Tss2_TctiLdr_Initialize(connection.tcti, &tcti)
        // Whatever fails while opening (no TCTI library, no device, a refused connection, a TPM in
        // failure mode) means that no TPM can be used here.
        guard loaded == 0, let tcti else { throw Self.failure(loaded).unavailable(on: connection) }
        var context: OpaquePointer? = nil
        let initialized = Esys_Initialize(&context, tcti, nil)
        guard initialized == 0, let context else {
            var owned: OpaquePointer? = tcti
            Tss2_TctiLdr_Finalize(&owned)
            throw Self.failure(initialized).unavailable(on: connection)
        }
        self.context = context
        self.tcti = tcti
        self.connection = connection
    }

    deinit {
        var owned: OpaquePointer? = context
        Esys_Finalize(&owned)
        Tss2_TctiLdr_Finalize(&tcti)
    }

    /// Runs `body` over a fresh connection, closed afterwards.
    static func with<Result>(
        _ connection: TPMConnection, _ body: (ESAPIConnection) throws(KeyAuthError) -> Result
    ) throws(KeyAuthError) -> Result {
        try body(ESAPIConnection(connection))
    }

    /// Reads tagged TPM properties from `first` on, up to `count` of them, following `moreData`.
    func properties(from first: UInt32, count: UInt32 = 64) throws(KeyAuthError) -> [UInt32: UInt32] {
        var result: [UInt32: UInt32] = [:]
        var next = first
        let groupEnd = (first & 0xFFFF_FF00) + 0x100
        while next < groupEnd {
            var more: UInt8 = 0
            var data: UnsafeMutablePointer<TPMS_CAPABILITY_DATA>? = nil
            let status = Esys_GetCapability(
                context, ESAPIConnection.noSession, ESAPIConnection.noSession, ESAPIConnection.noSession,
                ESAPIConnection.tpmProperties, next, count, &more, &data)
            guard status == 0, let data else {
                throw Self.error(status, doing: "report its properties", on: connection)
            }
            defer { Esys_Free(data) }
            let list = data.pointee.data.tpmProperties
            let read: [(UInt32, UInt32)] = withUnsafeBytes(of: list.tpmProperty) { raw in
                let tagged = raw.bindMemory(to: TPMS_TAGGED_PROPERTY.self)
                return tagged.prefix(Int(list.count)).map { ($0.property, $0.value) }
            }
            for (property, value) in read where property < groupEnd { result[property] = value }
            guard more != 0, let last = read.last?.0, last >= next, count > 1 else { break }
            next = last + 1
        }
        return result
    }

    /// Whether the TPM accepts RSA keys of `bits` for signing (`TPM2_TestParms`).
    func acceptsRSA(bits: Int) -> Bool {
        acceptsRSA(bits: bits, signingWith: nil)
    }

    /// Whether the TPM accepts an RSA-2048 key whose scheme fixes RSASSA with `hash`: a TPM
    /// that does not implement the hash refuses it (`TPM2_TestParms`), and so refuses to sign
    /// with it whatever the key's scheme.
    func signsRSASSA(hash: TPM2_ALG_ID) -> Bool {
        acceptsRSA(bits: 2048, signingWith: hash)
    }

    /// `TPM2_TestParms` of an unrestricted RSA signing key of `bits`, with the null scheme or
    /// RSASSA over `hash`.
    private func acceptsRSA(bits: Int, signingWith hash: TPM2_ALG_ID?) -> Bool {
        var parameters = TPMT_PUBLIC_PARMS()
        parameters.type = TPM2_ALG_RSA
        parameters.parameters.rsaDetail.symmetric.algorithm = TPM2_ALG_NULL
        parameters.parameters.rsaDetail.scheme.scheme = hash == nil ? TPM2_ALG_NULL : TPM2_ALG_RSASSA
        if let hash { parameters.parameters.rsaDetail.scheme.details.rsassa.hashAlg = hash }
        parameters.parameters.rsaDetail.keyBits = UInt16(bits)
        parameters.parameters.rsaDetail.exponent = 0
        return Esys_TestParms(
            context, ESAPIConnection.noSession, ESAPIConnection.noSession, ESAPIConnection.noSession, &parameters) == 0
    }

    /// `ESYS_TR_NONE`.
    static let noSession: UInt32 = 0xFFF
    /// `TPM2_CAP_TPM_PROPERTIES`.
    private static let tpmProperties: UInt32 = 6

    private static func failure(_ status: UInt32) -> TPMFailure {
        TPMFailure(
            responseCode: TPMResponseCode(status), text: Tss2_RC_Decode(status).map { String(cString: $0) } ?? "")
    }

    static func error(_ status: UInt32, doing operation: String, on connection: TPMConnection) -> KeyAuthError {
        failure(status).error(doing: operation, on: connection)
    }
}

@available(*, unavailable)
extension ESAPIConnection: Sendable {}
