/// A page for a refused request (another site's form, an expired token), with a way back to the
/// account page.
struct RefusedPage: Sendable {
    var basePath: String
    var reason: String
    var title = "Refused"

    var html: HTML {
        PageDocument.card(
            basePath: basePath, title: title,
            content: """
                <p>\(reason)</p>
                <p><a href="\(PageDocument.accountPath("", basePath: basePath))">Back to your account</a></p>
                """
        ).html
    }
}
