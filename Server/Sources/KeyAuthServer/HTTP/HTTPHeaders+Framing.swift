extension HTTPHeaders {
    /// Why these request headers frame the body ambiguously, or nil when they do not.
    ///
    /// libmicrohttpd reads the body by the first `Transfer-Encoding` when there is one (and
    /// until the connection closes for a coding other than `chunked`), else by the first
    /// `Content-Length`, and keeps a field whose name ends in a space under that name. A proxy in
    /// front may read the same bytes another way (the last `Content-Length`, or one spelled
    /// `Content-Length :`), and what one of them takes for a body the other takes for the next
    /// request on the connection: a request smuggled past the proxy's rules, or other users'
    /// requests swallowed as a body. RFC 9112 section 6.3 lets a server refuse these, and it
    /// must close the connection after; the transport answers before reading any of the body.
    package var framingProblem: String? {
        var lengths = 0
        var encodings = 0
        var encoding = ""
        var length = ""
        for field in self {
            guard !field.name.isEmpty, field.name.utf8.allSatisfy(Self.isTokenByte) else {
                return "a header field's name holds a character that a field name cannot (RFC 9110 section 5.1)"
            }
            if Self.sameName(field.name, "Content-Length") {
                lengths += 1
                length = field.value
            } else if Self.sameName(field.name, "Transfer-Encoding") {
                encodings += 1
                encoding = field.value
            }
        }
        if lengths > 1 { return "the request has more than one Content-Length" }
        if encodings > 1 { return "the request has more than one Transfer-Encoding" }
        if lengths == 1 && encodings == 1 { return "the request has both Content-Length and Transfer-Encoding" }
        if encodings == 1 && !Self.mediaType(of: encoding, is: "chunked") {
            return "the request's Transfer-Encoding is not chunked, the only one this server reads"
        }
        if lengths == 1 {
            let digits = Substring(length).trimmingWhitespace()
            guard !digits.isEmpty, digits.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) })
            else { return "the request's Content-Length is not a number" }
        }
        return nil
    }

    /// RFC 9110 section 5.6.2's `tchar`: what a field name is made of.
    private static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            true
        default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
