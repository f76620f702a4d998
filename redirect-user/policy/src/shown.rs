//! Lists as log fields and messages print them: comma-separated values, `-` for none (never
//! Rust's `Debug`, with its brackets, quotes and `Some(..)`).
use std::fmt;

/// `a,b,c` for the items of a slice, `-` when it is empty.
#[derive(Debug, Clone, Copy)]
pub struct Comma<'a, T>(pub &'a [T]);

impl<T: fmt::Display> fmt::Display for Comma<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("-");
        }
        for (i, item) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{item}")?;
        }
        Ok(())
    }
}

/// [`Comma`] over paths (which have no `Display` of their own).
#[derive(Debug, Clone, Copy)]
pub struct Paths<'a>(pub &'a [std::path::PathBuf]);

impl fmt::Display for Paths<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: Vec<_> = self.0.iter().map(|p| p.display()).collect();
        Comma(&shown).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_print_plain() {
        let addrs: Vec<std::net::IpAddr> = vec![[10, 0, 0, 1].into(), [10, 0, 0, 2].into()];
        assert_eq!(Comma(&addrs).to_string(), "10.0.0.1,10.0.0.2");
        assert_eq!(Comma::<u8>(&[]).to_string(), "-");
        assert_eq!(Paths(&["/a".into(), "/b".into()]).to_string(), "/a,/b");
    }
}
