//! HTML pieces the dashboard's pages share: escaping, URL paths, and the page shell.

use std::fmt::Write as _;

/// `text` safe in HTML text and in a quoted attribute value (`&`, `<`, `>`, `"`, `'` replaced,
/// and characters XML cannot carry): the charts' own escaping, so one function escapes the whole
/// page.
pub(crate) fn esc(text: &str) -> String {
    idemgate_chart::escape(text)
}

/// `segment` as one URL path segment: everything but unreserved characters percent-encoded
/// (a `/` in an event id included).
pub(crate) fn segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The value of `name` in a query string (`a=1&b=x+y`), form-decoded (`+` is a space, `%XX` a
/// byte; bytes that are not UTF-8 are replaced). The first one wins.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k) == name).then(|| decode(v))
        })
        .next()
}

/// `application/x-www-form-urlencoded` decoding of one name or value.
fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| {
            bytes
                .get(at)
                .and_then(|b| char::from(*b).to_digit(16))
                .map(|d| d as u8)
        };
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => {
                    out.push(hi << 4 | lo);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The path of one event's page.
pub(crate) fn event_path(source: &str, event_id: &str) -> String {
    format!(
        "/dashboard/events/{}/{}",
        segment(source),
        segment(event_id)
    )
}

/// The CSS of every page: system fonts, a readable measure at 1280 px, one column on a phone.
/// Charts come twice (laid out for 720 and for 420 units); the width shows one.
const STYLE: &str = r#"
:root { color-scheme: light; --ink: #1a1a1a; --muted: #555; --line: #d0d0d0; --bg: #f6f6f4; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; color: var(--ink); background: var(--bg); }
header, main, footer { max-width: 1240px; margin: 0 auto; padding: 0 16px; }
header { padding-top: 12px; }
h1 { font-size: 1.5rem; margin: 0.2rem 0; }
h2 { font-size: 1.25rem; margin: 1.6rem 0 0.4rem; border-bottom: 2px solid var(--line); padding-bottom: 0.2rem; }
h3 { font-size: 1.02rem; margin: 0 0 0.4rem; }
a { color: #0b5cad; }
.muted { color: var(--muted); }
.bar { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: baseline; }
form.search { display: flex; flex-wrap: wrap; gap: 6px; align-items: end; margin: 8px 0; }
form.search label { display: flex; flex-direction: column; font-size: 0.85rem; color: var(--muted); }
input, select, button { font: inherit; padding: 5px 8px; border: 1px solid #888; border-radius: 4px; background: #fff; color: var(--ink); }
input[name=event_id] { min-width: 16rem; }
button { cursor: pointer; background: #0b5cad; border-color: #0b5cad; color: #fff; }
ul.health { list-style: none; padding: 0; margin: 8px 0; display: grid; grid-template-columns: repeat(auto-fit, minmax(260px, 1fr)); gap: 8px; }
ul.health li { background: #fff; border: 1px solid var(--line); border-left: 8px solid #999; border-radius: 4px; padding: 8px 10px; }
ul.health li.green { border-left-color: #1b7a3a; }
ul.health li.amber { border-left-color: #c27c00; }
ul.health li.red { border-left-color: #b3261e; }
.state { font-weight: 700; margin-right: 4px; }
.green .state { color: #1b7a3a; } .amber .state { color: #8a5800; } .red .state { color: #b3261e; } .off .state { color: var(--muted); }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 12px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 4px; padding: 10px 12px; min-width: 0; }
.card.full { grid-column: 1 / -1; }
figure { margin: 0; }
figure svg { display: block; max-width: 100%; height: auto; }
.narrow { display: none; }
table { border-collapse: collapse; width: 100%; font-size: 0.92rem; }
th, td { text-align: left; padding: 3px 8px 3px 0; border-bottom: 1px solid #eee; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
.table { overflow-x: auto; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
ol.timeline { list-style: none; margin: 0; padding: 0 0 0 18px; border-left: 3px solid var(--line); }
ol.timeline li { position: relative; margin: 0 0 10px; padding-left: 6px; }
ol.timeline li::before { content: ""; position: absolute; left: -27px; top: 4px; width: 12px; height: 12px; border-radius: 50%; background: #fff; border: 3px solid #777; }
ol.timeline li.late_duplicate::before, ol.timeline li.conflict::before { border-color: #b3261e; }
ol.timeline li.completed::before, ol.timeline li.claimed::before { border-color: #1b7a3a; }
.outcome { font-weight: 700; }
.flag { font-weight: 700; color: #b3261e; }
.notice { background: #e8f3ea; border: 1px solid #1b7a3a; border-radius: 4px; padding: 6px 10px; }
form.replay { display: flex; flex-wrap: wrap; gap: 4px; margin: 2px 0; }
form.replay input[name=reason] { min-width: 10rem; flex: 1; }
code, .id { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; overflow-wrap: anywhere; }
footer { padding: 24px 16px; font-size: 0.85rem; color: var(--muted); }
@media (max-width: 760px) {
  .grid { grid-template-columns: minmax(0, 1fr); }
  .wide { display: none; }
  .narrow { display: block; }
  body { font-size: 16px; }
  input[name=event_id] { min-width: 0; width: 100%; }
  form.search label { flex: 1 1 100%; }
}
"#;

/// A whole page: `title`, and `body` (already HTML). `refresh`: reload every 30 s.
pub(crate) fn shell(title: &str, refresh: bool, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + STYLE.len() + 512);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    if refresh {
        out.push_str("<meta http-equiv=\"refresh\" content=\"30\">\n");
    }
    // No favicon request (it would be a 404 in the console).
    out.push_str("<link rel=\"icon\" href=\"data:,\">\n");
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    let _ = writeln!(out, "<style>{STYLE}</style>\n</head>\n<body>");
    out.push_str(body);
    out.push_str("</body>\n</html>\n");
    out
}

/// The search box: a source (one of `sources`, `selected` first) and an event id.
pub(crate) fn search_form(sources: &[&str], selected: Option<&str>, event_id: &str) -> String {
    let mut out = String::new();
    out.push_str(
        "<form class=\"search\" method=\"get\" action=\"/dashboard/events\" role=\"search\" aria-label=\"Find an event\">\n",
    );
    out.push_str("<label>source<select name=\"source\">");
    for s in sources {
        let mark = if Some(*s) == selected {
            " selected"
        } else {
            ""
        };
        let _ = write!(out, "<option{mark}>{}</option>", esc(s));
    }
    out.push_str("</select></label>\n");
    let _ = writeln!(
        out,
        "<label>event id<input name=\"event_id\" required maxlength=\"256\" value=\"{}\" placeholder=\"evt_...\"></label>",
        esc(event_id)
    );
    out.push_str("<button type=\"submit\">Find event</button>\n</form>\n");
    out
}

/// `chart` rendered twice, for wide and for narrow screens, in one figure.
pub(crate) fn figure(wide: &str, narrow: &str) -> String {
    format!(
        "<figure><div class=\"wide\">{wide}</div><div class=\"narrow\">{narrow}</div></figure>\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_encode_everything_but_unreserved_characters() {
        assert_eq!(segment("evt_1-a.b~c"), "evt_1-a.b~c");
        assert_eq!(segment("a/b c<é>"), "a%2Fb%20c%3C%C3%A9%3E");
        assert_eq!(
            event_path("shop", "<script>"),
            "/dashboard/events/shop/%3Cscript%3E"
        );
    }

    #[test]
    fn query_values_are_form_decoded() {
        let q = Some("source=shop&event_id=a+b%2Fc%3Cd&x&event_id=second");
        assert_eq!(query_param(q, "source").as_deref(), Some("shop"));
        assert_eq!(query_param(q, "event_id").as_deref(), Some("a b/c<d"));
        assert_eq!(query_param(q, "x").as_deref(), Some(""));
        assert_eq!(query_param(q, "token"), None);
        assert_eq!(query_param(None, "token"), None);
        assert_eq!(query_param(Some("t=%zz%4"), "t").as_deref(), Some("%zz%4"));
    }

    #[test]
    fn escaping_covers_text_and_attributes() {
        assert_eq!(
            esc("<script>alert('x')</script>&\""),
            "&lt;script&gt;alert(&apos;x&apos;)&lt;/script&gt;&amp;&quot;"
        );
    }
}
