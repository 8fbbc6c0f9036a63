/// The user's devices as ``KeyAuthClient/listDevices(accessToken:proofs:)`` collected them, page by page.
public struct DeviceList: Sendable, Hashable {
    /// The devices, in the server's order.
    public let devices: [Device]
    /// Whether the server had more devices than the client reads
    /// (``KeyAuthClient/maximumDevicePages`` pages of ``KeyAuthClient/devicePageSize``): the list
    /// is then the first ones only, and a caller should say so.
    public let isTruncated: Bool

    /// Creates a list.
    public init(devices: [Device], isTruncated: Bool) {
        self.devices = devices
        self.isTruncated = isTruncated
    }
}
