//! How a command's error is printed: the message and its causes, each said once.

/// The error and its causes, `: `-joined as anyhow's `{:#}` does, but each cause once: a
/// library error whose message already ends with its cause (`...: No such file or directory
/// (os error 2)`) does not repeat it.
pub(crate) fn chain_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod chain_tests {
    #[test]
    fn a_cause_already_said_is_not_said_again() {
        let os = std::io::Error::from_raw_os_error(2);
        let said = format!("connecting to X: {os}");
        let e = anyhow::Error::new(os).context(said).context("ping");
        let shown = super::chain_once(&e);
        assert_eq!(shown.matches("os error 2").count(), 1, "{shown}");
        assert!(shown.starts_with("ping: connecting to X: "), "{shown}");
    }
}
