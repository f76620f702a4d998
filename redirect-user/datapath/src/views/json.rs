//! One JSON shape for every command: name -> value lists serialise as objects (in order),
//! never as arrays of pairs.
use serde::{ser::SerializeMap as _, Serialize, Serializer};

/// Serialises `[(name, value)]` as `{"name": value, ...}`, keeping the order.
pub(crate) fn pairs_as_object<S, V>(pairs: &[(&'static str, V)], s: S) -> Result<S::Ok, S::Error>
where
    S: Serializer,
    V: Serialize,
{
    let mut map = s.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// Serialises counters as `{"name": value, ...}`, as every other view gives them.
pub(crate) fn counters_as_object<S: Serializer>(
    counters: &[crate::maps::counters::CounterValue],
    s: S,
) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(counters.len()))?;
    for c in counters {
        map.serialize_entry(c.name, &c.value)?;
    }
    map.end()
}

#[cfg(test)]
mod tests {
    #[derive(serde::Serialize)]
    struct T {
        #[serde(serialize_with = "super::pairs_as_object")]
        fill: Vec<(&'static str, usize)>,
    }

    #[test]
    fn pairs_become_an_object() {
        let t = T {
            fill: vec![("B", 2), ("A", 1)],
        };
        assert_eq!(
            serde_json::to_string(&t).expect("json"),
            r#"{"fill":{"B":2,"A":1}}"#
        );
    }
}
