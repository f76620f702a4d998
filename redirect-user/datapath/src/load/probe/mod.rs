//! Kernel features the datapath uses, each with what needs it and the kernel that added it,
//! probed before anything is loaded: a missing one is a sentence, not a verifier log. The
//! kernel table of docs/developer.md ("Kernel features and floor") is this list (a test keeps
//! them the same).
use aya::{
    maps::MapType,
    programs::ProgramType,
    sys::{is_helper_supported, is_map_supported, is_program_supported, BpfHelper},
};
use serde::Serialize;

use crate::{
    error::{Error, Result},
    sys::bpfsys,
};

/// How a feature is probed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Check {
    /// The kernel loads programs of this type.
    Program(ProgramType),
    /// The kernel creates maps of this type.
    Map(MapType),
    /// Programs of this type may call this helper.
    Helper(ProgramType, BpfHelper),
    /// sk_lookup programs may read `ingress_ifindex`.
    SkLookupIngressIfindex,
    /// A helper id no kernel has: shows what a missing feature looks like.
    Nonexistent,
}

/// One kernel feature.
#[derive(Debug, Clone, Copy)]
pub struct Feature {
    /// Short name, for [`ASSUME_MISSING_ENV`] and `redirect probe --json`.
    pub(crate) id: &'static str,
    /// What it is, as the kernel documentation names it.
    pub(crate) name: &'static str,
    /// What of ours needs it.
    pub(crate) needed_by: &'static str,
    /// The first kernel release that has it.
    pub(crate) since: &'static str,
    /// How to tell.
    pub(crate) check: Check,
    /// For a feature the datapath loads without: what it does then (else it is required).
    pub(crate) without: Option<&'static str>,
}

pub(super) const fn f(
    id: &'static str,
    name: &'static str,
    needed_by: &'static str,
    since: &'static str,
    check: Check,
) -> Feature {
    Feature {
        id,
        name,
        needed_by,
        since,
        check,
        without: None,
    }
}

impl Feature {
    /// The datapath loads without this feature, doing `without` instead.
    pub(super) const fn optional(self, without: &'static str) -> Self {
        Self {
            without: Some(without),
            ..self
        }
    }
}

/// Environment variable naming features (by [`Feature::id`], comma-separated) to treat as
/// missing whatever the kernel says: shows and tests what an older kernel gets. The binary
/// reads it and hands its value to [`assume_missing`]; no library reads it.
pub const ASSUME_MISSING_ENV: &str = "REDIRECT_PROBE_ASSUME_MISSING";

/// The features this process treats as missing ([`assume_missing`]), set once.
static ASSUMED_MISSING: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();

/// [`Feature::id`] of sk_lookup's `ingress_ifindex` (the one optional feature).
pub(crate) const INGRESS_IFINDEX: &str = "sk_lookup_ingress_ifindex";

mod features;
pub(crate) use features::{FEATURES, INGRESS_IFINDEX_FEATURE};

/// A probed feature's id (its JSON Schema pattern).
#[cfg(feature = "schema")]
const FEATURE_ID: &str = r"^[a-z0-9_]+$";

/// A probe's answer.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Serialize)]
pub struct Probed {
    /// The feature's short name.
    #[cfg_attr(feature = "schema", schemars(pattern(FEATURE_ID)))]
    pub(crate) id: &'static str,
    /// The feature.
    pub name: &'static str,
    /// What needs it.
    pub needed_by: &'static str,
    /// The kernel that added it.
    pub since: &'static str,
    /// Whether this kernel has it (false as well when assumed missing).
    pub present: bool,
    /// Treated as missing because [`ASSUME_MISSING_ENV`] names it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(crate) assumed_missing: bool,
    /// For an optional feature: what the datapath does without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub without: Option<&'static str>,
    /// Why the probe could not tell, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub(crate) error: Option<String>,
}

/// Treats the features `ids` names (comma-separated [`Feature::id`]s: the value of
/// [`ASSUME_MISSING_ENV`] as the binary read it) as missing in every probe of this process,
/// whatever the kernel says. Called once, at the start, before anything is probed; an id that
/// names no feature is an error listing the ids, and a second call with other ids is refused.
pub fn assume_missing(ids: &str) -> Result<()> {
    let mut out = Vec::new();
    for id in ids.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some(feature) = FEATURES.iter().find(|f| f.id == id) else {
            return Err(Error::UnknownFeatureId {
                var: ASSUME_MISSING_ENV,
                id: id.to_owned(),
                known: FEATURES.iter().map(|f| f.id).collect::<Vec<_>>().join(", "),
            });
        };
        out.push(feature.id);
    }
    let set = ASSUMED_MISSING.get_or_init(|| out.clone());
    if *set != out {
        return Err(Error::AssumedMissingTwice {
            was: set.join(","),
            now: out.join(","),
        });
    }
    Ok(())
}

/// The features this process treats as missing (none unless [`assume_missing`] said so).
pub(crate) fn assumed_missing() -> &'static [&'static str] {
    ASSUMED_MISSING.get().map_or(&[], Vec::as_slice)
}

/// Probes one feature; `assume_missing` reports it missing without asking the kernel.
pub(crate) fn probe_as(feature: &Feature, assume_missing: bool) -> Probed {
    let answer: std::result::Result<bool, String> = match feature.check {
        _ if assume_missing => Ok(false),
        Check::Program(t) => is_program_supported(t).map_err(|e| e.to_string()),
        Check::Map(t) => is_map_supported(t).map_err(|e| e.to_string()),
        Check::Helper(t, h) => is_helper_supported(t, h).map_err(|e| e.to_string()),
        Check::SkLookupIngressIfindex => Ok(bpfsys::sk_lookup_reads_ingress_ifindex()),
        // An id past every helper any kernel knows.
        Check::Nonexistent => Ok(bpfsys::helper_id_is_known(u32::MAX >> 1)),
    };
    let (present, error) = match answer {
        Ok(p) => (p, None),
        Err(e) => (false, Some(e)),
    };
    Probed {
        id: feature.id,
        name: feature.name,
        needed_by: feature.needed_by,
        since: feature.since,
        present,
        assumed_missing: assume_missing,
        without: feature.without,
        error,
    }
}

/// Probes one feature, as the kernel answers.
pub fn probe(feature: &Feature) -> Probed {
    probe_as(feature, false)
}

/// Probes every feature, those [`assume_missing`] named reported missing.
pub fn probe_all() -> Vec<Probed> {
    let assumed = assumed_missing();
    FEATURES
        .iter()
        .map(|f| probe_as(f, assumed.contains(&f.id)))
        .collect()
}

/// The first missing required feature as an error naming it, what needs it and the kernel
/// that added it (a missing optional feature is not an error: see [`Feature::without`]).
pub fn missing(probed: &[Probed]) -> Option<Error> {
    probed
        .iter()
        .find(|p| !p.present && p.without.is_none())
        .map(|p| Error::MissingFeature {
            feature: p.name,
            needed_by: p.needed_by,
            since: p.since,
            kernel: kernel_release(),
            detail: detail(p),
        })
}

/// What to add to a sentence about a missing feature: why the probe said so, if not the kernel.
pub fn detail(p: &Probed) -> String {
    if p.assumed_missing {
        format!(" (assumed missing by {ASSUME_MISSING_ENV})")
    } else {
        p.error
            .as_ref()
            .map(|e| format!(" (the probe itself failed: {e})"))
            .unwrap_or_default()
    }
}

/// Probes every feature; the first missing required one is an error. Returns the answers.
pub(crate) fn require_all() -> Result<Vec<Probed>> {
    let probed = probe_all();
    match missing(&probed) {
        Some(e) => Err(e),
        None => Ok(probed),
    }
}

/// The answer for feature `id` in `probed`.
pub(crate) fn answer<'a>(probed: &'a [Probed], id: &str) -> Option<&'a Probed> {
    probed.iter().find(|p| p.id == id)
}

/// The sk_lookup program this kernel loads: the one reading `ingress_ifindex` when it has it.
pub(crate) fn sk_lookup_program(probed: &[Probed]) -> &'static str {
    if answer(probed, INGRESS_IFINDEX).is_some_and(|p| p.present) {
        redirect_common::prog_names::SK_LOOKUP
    } else {
        redirect_common::prog_names::SK_LOOKUP_NO_IFINDEX
    }
}

/// This kernel's release (`uname -r`).
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// The feature no kernel has, for showing what a missing feature says.
pub const NONEXISTENT: Feature = f(
    "nonexistent_helper",
    "BPF helper #2147483647",
    "the --demo-missing check of `redirect probe`",
    "none",
    Check::Nonexistent,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docs_table_is_the_feature_list() {
        let readme = include_str!("../../../../../docs/developer.md");
        for f in FEATURES {
            let row = format!(
                "| `{}` | {} | {} | {} |",
                f.id, f.name, f.needed_by, f.since
            );
            assert!(
                readme.contains(&row),
                "docs/developer.md lacks the kernel-table row {row}"
            );
        }
    }

    #[test]
    fn a_missing_feature_is_a_sentence() {
        let p = Probed {
            id: "x",
            name: "x helper",
            needed_by: "the y hook",
            since: "5.17",
            present: false,
            assumed_missing: true,
            without: None,
            error: None,
        };
        let e = missing(std::slice::from_ref(&p))
            .expect("missing")
            .to_string();
        assert!(
            e.contains("x helper")
                && e.contains("the y hook")
                && e.contains("5.17")
                && e.contains("assumed missing by REDIRECT_PROBE_ASSUME_MISSING"),
            "{e}"
        );
        // An optional feature missing is no error; the loader picks the program without it.
        let optional = Probed {
            id: INGRESS_IFINDEX,
            without: Some("something else"),
            ..p
        };
        assert!(missing(std::slice::from_ref(&optional)).is_none());
        assert_eq!(
            sk_lookup_program(&[optional]),
            redirect_common::prog_names::SK_LOOKUP_NO_IFINDEX
        );
    }

    #[test]
    fn feature_ids_are_unique_and_one_is_optional() {
        for (i, f) in FEATURES.iter().enumerate() {
            assert!(
                FEATURES[i + 1..].iter().all(|g| g.id != f.id),
                "{} twice",
                f.id
            );
        }
        let optional: Vec<&str> = FEATURES
            .iter()
            .filter(|f| f.without.is_some())
            .map(|f| f.id)
            .collect();
        assert_eq!(optional, [INGRESS_IFINDEX]);
    }
}
