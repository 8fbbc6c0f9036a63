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
}
