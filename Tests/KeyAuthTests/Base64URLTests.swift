import Foundation
import KeyAuth
import Testing

@Suite("Strict base64url")
struct Base64URLTests {
    @Test("base64url decoding is canonical")
    func base64URL() {
        #expect(Base64URL.decode("Zm9v") == Array("foo".utf8))
        #expect(Base64URL.decode("Zm9v=") == nil)
        #expect(Base64URL.decode("Zm8") == Array("fo".utf8))
        #expect(Base64URL.decode("Zm9") == nil)  // non-zero unused bits
        #expect(Base64URL.decode("Zm+v") == nil)
        #expect(Base64URL.decode("Z") == nil)
        #expect(Base64URL.encode(Array("fo".utf8)) == "Zm8")
    }

    @Test("every length from 0 to 100 bytes encodes as Foundation's base64, URL-safe and unpadded, and decodes back")
    func agreesWithFoundation() {
        var generator = SeededBytes(seed: 7)
        for length in 0...100 {
            let bytes = generator.bytes(length)
            let expected = Data(bytes).base64EncodedString().replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            let encoded = Base64URL.encode(bytes)
            #expect(encoded == expected, "length \(length)")
            #expect(Base64URL.decode(encoded) == bytes, "length \(length)")
            // A slice (not starting at index 0) and a non-contiguous collection code the same.
            #expect(Base64URL.encode(([0] + bytes)[1...]) == expected, "length \(length)")
            #expect(Base64URL.encode(bytes.lazy.map { $0 }) == expected, "length \(length)")
            var appended = Array("x.".utf8)
            Base64URL.encode(bytes, appendingTo: &appended)
            #expect(appended == Array(("x." + expected).utf8), "length \(length)")
        }
    }

    @Test("a foreign byte anywhere, an impossible length and non-zero unused bits are refused")
    func refusals() {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)
        var generator = SeededBytes(seed: 11)
        for length in 1...12 {
            let text = Array(Base64URL.encode(generator.bytes(length)).utf8)
            for position in text.indices {
                for byte in UInt8.min...UInt8.max where !alphabet.contains(byte) {
                    var changed = text
                    changed[position] = byte
                    #expect(Base64URL.decode(utf8: changed) == nil, "byte \(byte) at \(position) of \(length)")
                }
            }
        }
        for count in [1, 5, 9, 13] {
            #expect(Base64URL.decode(String(repeating: "A", count: count)) == nil, "\(count) characters")
        }
        // The last character of a 2- or 3-character tail may only carry the bits that are used.
        for tail in ["AB", "AC", "AP", "AAB", "AAC", "AAD"] {
            #expect(Base64URL.decode("AAAA" + tail) == nil, "\(tail)")
        }
        for tail in ["AA", "AQ", "Aw", "AAA", "AAE", "AA8"] {
            #expect(Base64URL.decode("AAAA" + tail) != nil, "\(tail)")
        }
    }
}

/// Reproducible pseudo-random bytes (a 64-bit linear congruential generator).
struct SeededBytes {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt8 {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        return UInt8(truncatingIfNeeded: state >> 56)
    }

    mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in next() }
    }
}
