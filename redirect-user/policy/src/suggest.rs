//! "Did you mean": the closest of the known names to one that is not known, for flags and
//! annotation keys. Names are compared without case and without `-`/`_` (so
//! `excludeOutboundPort` meets `exclude-outbound-ports`), by edit distance.

/// The known name closest to `given`, if one is close enough to be a typo: at most 2 edits,
/// or a third of the name for longer ones.
pub fn closest<'a>(given: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let g = folded(given);
    let limit = (g.chars().count() / 3).max(2);
    known
        .into_iter()
        .map(|k| (distance(&g, &folded(k)), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

fn folded(s: &str) -> String {
    s.chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Levenshtein distance over chars.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_meets_its_name_and_nonsense_meets_nothing() {
        let known = [
            "exclude-outbound-ports",
            "exclude-inbound-ports",
            "include-outbound-ips",
        ];
        assert_eq!(
            closest("excludeOutboundPort", known),
            Some("exclude-outbound-ports")
        );
        assert_eq!(
            closest("istio-service-cidrs", ["istio-service-cidr"]),
            Some("istio-service-cidr")
        );
        assert_eq!(closest("frobnicate", known), None);
    }
}
