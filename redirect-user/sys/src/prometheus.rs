//! The Prometheus text exposition format, written in one place for every endpoint (the
//! daemon's, `redirect attach --metrics-file`, the proxy's): a family's `# HELP` and `# TYPE`
//! lines, then its samples with their label values escaped. Ours rather than a library's: the
//! metric names, help texts and label order are what the shipped alert rules and dashboards
//! select on, byte for byte, and prometheus-client writes OpenMetrics instead (`_total`
//! appended to a counter's name by itself, an `# EOF` line).
use std::fmt::{Display, Write as _};

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever goes up (its name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// Text in the exposition format, built family by family.
#[derive(Debug, Clone, Default)]
pub struct Text(String);

impl Text {
    /// An empty exposition.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares family `name` of `kind` with its `help` line.
    pub fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Self {
        let _ = writeln!(
            self.0,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.name()
        );
        self
    }

    /// One sample of `name` with `labels` (name, value) in the order given, values escaped.
    pub fn sample(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        value: impl Display,
    ) -> &mut Self {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{label}=\"{}\"", escape(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
        self
    }

    /// The text.
    pub fn finish(self) -> String {
        self.0
    }
}

/// A label value with `\`, `"` and newlines escaped as the exposition format wants.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_and_samples_in_the_exposition_format() {
        let mut t = Text::new();
        t.family("x_total", Kind::Counter, "Things.")
            .sample("x_total", &[("a", "q\"\\\nz"), ("b", "2")], 3)
            .family("y", Kind::Gauge, "Level.")
            .sample("y", &[], -1);
        assert_eq!(
            t.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\nx_total{a=\"q\\\"\\\\\\nz\",b=\"2\"} 3\n\
             # HELP y Level.\n# TYPE y gauge\ny -1\n"
        );
    }
}
