/// A response code from the TPM software stack (a `TSS2_RC`), sorted into what keyauth does about it.
///
/// The stack packs its answers into 32 bits: the top byte above bit 16 names the layer that
/// answered (0 for the TPM itself, 10 for the transport), the low bits the answer. The TPM's own
/// codes come in two formats, and "format 1" codes also carry the number of the handle, session
/// or parameter at fault, which must be masked out before comparing (TPM 2.0 Part 2, section 6.6).
struct TPMResponseCode: Hashable, Sendable, CustomStringConvertible {
    let rawValue: UInt32

    init(_ rawValue: UInt32) {
        self.rawValue = rawValue
    }

    /// What the code means for a caller.
    enum Meaning: Hashable, Sendable {
        /// The authorization value (the PIN) was wrong; the TPM counted the failure.
        case authorizationFailed
        /// The TPM refuses authorizations for now: dictionary-attack lockout.
        case lockedOut
        /// No TPM answered: no device, a closed socket, a TPM in failure mode or not started.
        case unreachable
        /// The TPM does not accept the key blob: made by another TPM, or this one was cleared.
        case foreignKey
        /// The TPM cannot do this (an unsupported key size or algorithm).
        case unsupported
        /// Anything else.
        case other
    }

    /// The layer that produced the code (`TSS2_RC_LAYER`).
    var layer: UInt32 { (rawValue >> 16) & 0xFF }

    private static let tpmLayer: UInt32 = 0
    private static let esapiLayer: UInt32 = 7
    private static let sysLayer: UInt32 = 8
    private static let tctiLayer: UInt32 = 10
    private static let resourceManagerLayer: UInt32 = 11
    private static let resourceManagerTPMLayer: UInt32 = 12

    /// TSS base codes (tss2_common.h) that mean the transport to the TPM failed.
    private static let transportBaseCodes: Set<UInt32> = [
        8,  // NO_CONNECTION
        9,  // TRY_AGAIN
        10,  // IO_ERROR
        17,  // MALFORMED_RESPONSE
        19,  // INSUFFICIENT_RESPONSE
        20,  // INCOMPATIBLE_TCTI
        22,  // BAD_TCTI_STRUCTURE
        49,  // NO_TPM
    ]

    var meaning: Meaning {
        switch layer {
        case Self.tpmLayer, Self.resourceManagerTPMLayer:
            return Self.meaningOfTPMCode(rawValue & 0xFFFF)
        case Self.tctiLayer, Self.resourceManagerLayer:
            return .unreachable
        case Self.esapiLayer, Self.sysLayer:
            return Self.transportBaseCodes.contains(rawValue & 0xFFFF) ? .unreachable : .other
        default:
            return .other
        }
    }

    /// Reads a code of the TPM layer.
    private static func meaningOfTPMCode(_ code: UInt32) -> Meaning {
        let formatOne: UInt32 = 0x080
        if code & formatOne != 0 {
            // Format 1: bits 0-5 the error, bit 6 "parameter", bits 8-11 the number at fault.
            switch code & 0x0BF {
            case 0x08E, 0x0A2: return .authorizationFailed  // TPM_RC_AUTH_FAIL, TPM_RC_BAD_AUTH
            case 0x09F, 0x0A5: return .foreignKey  // TPM_RC_INTEGRITY, TPM_RC_BINDING
            case 0x083, 0x084, 0x087, 0x092: return .unsupported  // HASH, VALUE, KEY_SIZE, SCHEME
            default: return .other
            }
        }
        switch code & 0xFFF {
        case 0x921: return .lockedOut  // TPM_RC_LOCKOUT
        case 0x100, 0x101: return .unreachable  // TPM_RC_INITIALIZE, TPM_RC_FAILURE
        default: return .other
        }
    }

    var description: String { "0x" + String(rawValue, radix: 16, uppercase: true) }
}
