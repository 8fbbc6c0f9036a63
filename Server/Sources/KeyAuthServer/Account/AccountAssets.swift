/// The account page's style sheet and its one script, served from the binary (no file to
/// install, nothing from a third party) at `/account/account.css` and `/account/account.js`, and
/// the pages' icon at `/favicon.svg`.
enum AccountAssets {
    /// Where the icon is: at the root, where a browser that ignores `<link rel="icon">` still
    /// looks first for an icon of the site.
    static let faviconPath = "/favicon.svg"

    /// The icon: a key on the page's accent colour, 32 units square, drawn with shapes only (no
    /// text, no script, nothing fetched).
    static let favicon = """
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">\
        <rect width="32" height="32" rx="7" fill="#2f6fde"/>\
        <circle cx="11" cy="16" r="5.5" fill="none" stroke="#fff" stroke-width="3"/>\
        <path d="M16.5 16H27M23 16v5M27 16v4" fill="none" stroke="#fff" stroke-width="3" stroke-linecap="round"/>\
        </svg>

        """

    /// How long a browser keeps the icon without asking again: a day, so that a new icon after
    /// an upgrade shows within one.
    static let faviconCaching = "public, max-age=86400"

    /// The page's only style sheet.
    static let css = """
        :root { color-scheme: light dark; --accent: #2f6fde; --muted: #6b7280; --line: #d5d9e0; }
        * { box-sizing: border-box; }
        body { font: 16px/1.5 system-ui, sans-serif; margin: 0; background: Canvas; color: CanvasText; }
        header { display: flex; align-items: center; justify-content: space-between; gap: 1rem;
          padding: 0.75rem 1.5rem; border-bottom: 1px solid var(--line); }
        header h1 { font-size: 1.25rem; margin: 0; }
        header h1 .via { font-weight: 400; color: var(--muted); }
        button.link { border: none; background: none; color: var(--accent); padding: 0; text-decoration: underline; }
        form.another-user { margin-top: 1rem; }
        main { max-width: 72rem; margin: 0 auto; padding: 1.5rem; }
        .card { max-width: 28rem; margin: 3rem auto; padding: 1.5rem; border: 1px solid var(--line);
          border-radius: 0.75rem; }
        label { display: block; margin-bottom: 0.5rem; font-weight: 600; }
        input[type=text] { font: inherit; padding: 0.4rem 0.6rem; border: 1px solid var(--line);
          border-radius: 0.4rem; min-width: 0; }
        .card input[type=text] { width: 100%; margin-bottom: 1rem; }
        button { font: inherit; padding: 0.35rem 0.9rem; border-radius: 0.4rem; border: 1px solid var(--accent);
          background: var(--accent); color: white; cursor: pointer; }
        button.secondary { background: transparent; color: var(--accent); }
        button.danger { border-color: #c0392b; background: #c0392b; }
        #binding-code { font-size: 3rem; font-weight: 700; letter-spacing: 0.2em; text-align: center;
          margin: 1rem 0; }
        .muted { color: var(--muted); }
        .message { padding: 0.6rem 0.9rem; border-radius: 0.4rem; background: #fff4d6; color: #5c4400; }
        table { width: 100%; border-collapse: collapse; margin-top: 1rem; }
        th, td { text-align: left; padding: 0.5rem; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { font-size: 0.85rem; color: var(--muted); }
        td.actions form { display: inline-block; margin: 0 0.25rem 0.25rem 0; }
        td.kid { font-family: ui-monospace, monospace; font-size: 0.8rem; word-break: break-all; }
        .status-active { color: #1e8449; } .status-pending { color: #b9770e; }
        .status-revoked, .status-denied, .status-expired { color: var(--muted); }
        form.inline { display: inline; }
        time { white-space: nowrap; }
        details.rename { display: inline-block; }
        details.rename summary { cursor: pointer; color: var(--accent); }
        details.past-devices { margin-top: 1.5rem; }
        details.past-devices summary { cursor: pointer; color: var(--muted); }
        header { flex-wrap: wrap; }
        @media (max-width: 40rem) {
          main { padding: 0.75rem; }
          header { padding: 0.5rem 0.75rem; }
          table, thead, tbody, tr, th, td { display: block; }
          thead { display: none; }
          tr { border: 1px solid var(--line); border-radius: 0.5rem; margin-bottom: 0.75rem; padding: 0.25rem 0.5rem; }
          td { border: none; padding: 0.2rem 0; }
          td.name { font-weight: 600; }
          td[data-label]::before { content: attr(data-label) ": "; color: var(--muted); }
        }
        """

    /// The page's only script: it shows times in the browser's local time ("5 minutes ago" when
    /// recent), and on the waiting page asks for the sign-in's state every two seconds and
    /// submits the Continue form once the state changes. Without it the page works the same,
    /// with UTC times and the Continue button.
    static let javaScript = """
        "use strict";
        (function () {
          var times = document.querySelectorAll("time[datetime]");
          for (var i = 0; i < times.length; i++) {
            var when = new Date(times[i].getAttribute("datetime"));
            if (isNaN(when.getTime())) { continue; }
            var minutes = Math.round((Date.now() - when.getTime()) / 60000);
            times[i].title = times[i].textContent;
            if (minutes >= 0 && minutes < 1) {
              times[i].textContent = "just now";
            } else if (minutes >= 1 && minutes < 60) {
              times[i].textContent = minutes + (minutes === 1 ? " minute ago" : " minutes ago");
            } else {
              times[i].textContent = when.toLocaleString();
            }
          }
        })();
        (function () {
          var form = document.getElementById("continue-form");
          if (!form) { return; }
          var statusURL = form.getAttribute("data-status-url");
          function later(delay) { window.setTimeout(check, delay); }
          function check() {
            fetch(statusURL, { credentials: "same-origin", cache: "no-store" })
              .then(function (response) { return response.ok ? response.json() : { status: "pending" }; })
              .then(function (body) {
                if (body.status === "pending") { later(2000); } else { form.submit(); }
              })
              .catch(function () { later(5000); });
          }
          later(2000);
        })();
        """
}
