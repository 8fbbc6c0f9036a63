/// Looking into PEM text without decoding it, for the checks made before OpenSSL sees a key.
enum PEMText {
    /// Whether `pem` contains `marker` (an ASCII label such as `PRIVATE KEY`).
    static func contains(_ pem: [UInt8], _ marker: String) -> Bool {
        let marker = Array(marker.utf8)
        guard let first = marker.first, pem.count >= marker.count else { return false }
        for start in 0...(pem.count - marker.count) where pem[start] == first {
            if pem[start..<(start + marker.count)].elementsEqual(marker) { return true }
        }
        return false
    }
}
