//! Text made safe for the formats the evidence is written in: one function per format, so that
//! every page, picture and table escapes the same way (`&` first, or an escaped `<` would show as
//! a literal `&lt;`).

/// Text for HTML and SVG (XML): element content and double-quoted attribute values.
pub fn html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
    out
}

/// Text for one cell of a Markdown table: on one line, its `|` escaped so that it does not end
/// the cell. Markdown passes `<` and `&` through as HTML: a cell that shows code or SQL is
/// escaped with [`html`] first.
pub fn markdown_cell(text: &str) -> String {
    text.replace('\n', " ").replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_the_ampersand_first() {
        assert_eq!(
            html("a < b && c > \"d\""),
            "a &lt; b &amp;&amp; c &gt; &quot;d&quot;"
        );
        // An escaped `<` is not escaped twice: the page shows `<`, not `&lt;`.
        assert_eq!(html("<"), "&lt;");
        assert_eq!(html("&lt;"), "&amp;lt;");
        assert_eq!(html("plain"), "plain");
    }

    #[test]
    fn a_markdown_cell_keeps_its_pipe_and_its_line() {
        assert_eq!(markdown_cell("a | b\nc"), "a \\| b c");
        assert_eq!(markdown_cell("x < y & z"), "x < y & z");
    }
}
