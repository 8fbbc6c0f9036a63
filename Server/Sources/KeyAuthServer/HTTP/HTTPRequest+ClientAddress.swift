extension HTTPRequest {
    /// The address the rate limits count and the logs name: the peer, or behind a trusted proxy
    /// (`--trust-proxy`) the last `X-Forwarded-For` hop, the one the proxy itself added (earlier
    /// hops are client-chosen). A last hop that is not an address leaves the peer.
    func clientAddress(trustingProxy trustProxy: Bool) -> String {
        guard trustProxy, let header = headers.values(for: "X-Forwarded-For").last,
            let last = header.split(separator: ",").last?.trimmingWhitespace(), RateLimitKey(parsing: last) != nil
        else { return clientAddress }
        return last
    }
}
