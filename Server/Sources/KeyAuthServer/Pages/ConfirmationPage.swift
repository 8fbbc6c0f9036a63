/// A page with one question and one form: the hidden `fields` and a button.
struct ConfirmationPage: Sendable {
    var basePath: String
    var title: String
    var text: String
    var action: String
    /// The form's fields, hidden ones included.
    var fields: HTML
    var button: String

    var html: HTML {
        PageDocument.card(
            basePath: basePath, title: title,
            content: """
                <p>\(text)</p>
                <form method="post" action="\(action)">
                \(fields)
                <button type="submit">\(button)</button>
                </form>
                """
        ).html
    }
}
