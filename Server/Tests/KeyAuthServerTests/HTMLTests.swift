import KeyAuth
import Testing

@testable import KeyAuthServer

@Suite("HTML pages") struct HTMLTests {
    @Test("an interpolated string is escaped")
    func escapesStrings() {
        let name = "<script>\"'&"
        let html: HTML = "<p title=\"\(name)\">\(name)</p>"
        #expect(
            html.markup == "<p title=\"&lt;script&gt;&quot;&#39;&amp;\">&lt;script&gt;&quot;&#39;&amp;</p>")
    }

    @Test("an interpolated HTML value is kept as markup, not escaped again")
    func keepsMarkup() {
        let inner: HTML = "<strong>\("a&b")</strong>"
        let outer: HTML = "<p>\(inner)</p>"
        #expect(outer.markup == "<p><strong>a&amp;b</strong></p>")
        #expect(
            [inner, inner].joined(separator: "<br>").markup == "<strong>a&amp;b</strong><br><strong>a&amp;b</strong>")
    }

    @Test("other values are text too")
    func escapesOtherValues() {
        let count = 3
        let absent: HTML? = nil
        let html: HTML = "<p>\(count)\(absent)</p>"
        #expect(html.markup == "<p>3</p>")
    }

    @Test("a device name cannot add markup to the devices page")
    func devicesPageEscapesNames() {
        let session = BrowserSessionRecord(
            idHash: [1], csrfToken: "t\"k", user: "al<i>ce", signInRequestID: nil, bindingCode: "AB12",
            createdAt: 0, expiresAt: 100)
        let device = DeviceRecord(
            kid: "kid-1", user: "al<i>ce", name: "<script>alert(1)</script>", publicKeyPEM: "x", status: .active,
            createdAt: 0)
        let page = DevicesPage(
            basePath: "", session: session, devices: [DevicesPage.Device(record: device, status: .active)],
            message: nil
        ).html.markup
        #expect(!page.contains("<script>alert"))
        #expect(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"))
        #expect(page.contains("al&lt;i&gt;ce"))
        #expect(page.contains("value=\"t&quot;k\""))
    }

    @Test("the devices page shows each device's tier, escaped like every stored value")
    func devicesPageShowsTiers() {
        let session = BrowserSessionRecord(
            idHash: [1], csrfToken: "t", user: "alice", signInRequestID: nil, bindingCode: "AB12", createdAt: 0,
            expiresAt: 100)
        let devices = [DeviceTier.attested, .software, DeviceTier(rawValue: "<b>new</b>")].enumerated().map {
            index, tier in
            DevicesPage.Device(
                record: DeviceRecord(
                    kid: "kid-\(index)", user: "alice", name: "device \(index)", publicKeyPEM: "x", status: .active,
                    createdAt: 0, tier: tier), status: .active)
        }
        let page = DevicesPage(basePath: "", session: session, devices: devices, message: nil).html.markup
        #expect(page.contains("<th>Tier</th>"))
        #expect(page.contains("<td class=\"tier tier-attested\" data-label=\"Tier\">attested</td>"))
        #expect(page.contains("<td class=\"tier tier-software\" data-label=\"Tier\">software</td>"))
        #expect(!page.contains("<b>new</b>"))
        #expect(!page.contains("not reported"))
    }
}
