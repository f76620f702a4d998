//! The apiserver client, whose bearer token file (the projected service-account token of
//! in-cluster credentials, a kubeconfig's `tokenFile`) is read again as soon as it changes: the
//! kubelet rotates that token in place, and a request after the rotation carries the new one.
use std::{
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use http::{header::AUTHORIZATION, HeaderValue, Request};
use kube::{
    client::{Body, ClientBuilder},
    Client, Config,
};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The token file could not be read or holds no usable token.
    #[error("reading the bearer token {}: {reason}", path.display())]
    Token {
        /// The token file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// kube-rs refused the configuration.
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// The client for `config` (call it inside the runtime the client will run on). A token file
/// is read here (an unreadable one is an error naming it) and again whenever it changes.
pub(crate) fn client(mut config: Config) -> Result<Client, ClientError> {
    let file = match (&config.auth_info.token, config.auth_info.token_file.take()) {
        // An inline token wins over a file, as kube-rs has it.
        (Some(_), _) | (None, None) => return Ok(Client::try_from(config)?),
        (None, Some(file)) => PathBuf::from(file),
    };
    let token = Arc::new(TokenFile::read(file)?);
    let layer = tower::util::MapRequestLayer::new(move |mut req: Request<Body>| {
        req.headers_mut().insert(AUTHORIZATION, token.header());
        req
    });
    Ok(ClientBuilder::try_from(config)?.with_layer(&layer).build())
}

/// What tells a file's contents changed without reading them: the kubelet's atomic writer
/// swaps the directory the token's symlink points into, so the file behind it is new.
type Identity = (u64, u64, i64, i64, u64);

fn identity(path: &Path) -> Option<Identity> {
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec(), m.len()))
}

/// A bearer token file and the header made from what it held when last read.
#[derive(Debug)]
struct TokenFile {
    path: PathBuf,
    last: Mutex<(Option<Identity>, HeaderValue)>,
}

impl TokenFile {
    fn read(path: PathBuf) -> Result<Self, ClientError> {
        let id = identity(&path);
        let header = bearer(&path)?;
        Ok(Self {
            path,
            last: Mutex::new((id, header)),
        })
    }

    /// The header for a request now: the file read again when it changed; when it cannot be
    /// read (a rotation half done), the last token read.
    fn header(&self) -> HeaderValue {
        let now = identity(&self.path);
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if now.is_some() && now != last.0 {
            match bearer(&self.path) {
                Ok(header) => {
                    tracing::info!(path = %self.path.display(), "bearer token changed: read again");
                    *last = (now, header);
                }
                Err(error) => {
                    tracing::warn!(%error, "the bearer token changed but cannot be read: the last one is sent");
                }
            }
        }
        last.1.clone()
    }
}

/// `Bearer TOKEN` from the file at `path` (surrounding whitespace dropped), marked sensitive.
fn bearer(path: &Path) -> Result<HeaderValue, ClientError> {
    let failed = |reason: String| ClientError::Token {
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| failed(e.to_string()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(failed("the file is empty".into()));
    }
    let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| failed("the token holds characters a header cannot carry".into()))?;
    value.set_sensitive(true);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_replaced_as_the_kubelet_does_is_read_again() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("token"));
        let data = |n: &str| dir.join(format!("..{n}"));
        std::fs::create_dir_all(data("1")).unwrap();
        std::fs::write(data("1").join("token"), "first\n").unwrap();
        std::os::unix::fs::symlink("..1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/token", dir.join("token")).unwrap();
        let file = TokenFile::read(dir.join("token")).unwrap();
        assert_eq!(file.header(), "Bearer first");
        assert!(file.header().is_sensitive());

        // The atomic writer: a new directory, `..data` swapped to it, the old one removed.
        std::fs::create_dir_all(data("2")).unwrap();
        std::fs::write(data("2").join("token"), "second").unwrap();
        std::os::unix::fs::symlink("..2", dir.join("..tmp")).unwrap();
        std::fs::rename(dir.join("..tmp"), dir.join("..data")).unwrap();
        std::fs::remove_dir_all(data("1")).unwrap();
        assert_eq!(file.header(), "Bearer second");

        // Gone for a moment: the last token is sent.
        std::fs::remove_file(dir.join("..data")).unwrap();
        assert_eq!(file.header(), "Bearer second");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_empty_or_missing_token_file_is_refused_naming_it() {
        let dir = std::env::temp_dir().join(redirect_testkit::unique_name("token"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), " \n").unwrap();
        let err = TokenFile::read(dir.join("token")).unwrap_err().to_string();
        assert!(err.contains("token") && err.contains("empty"), "{err}");
        let err = TokenFile::read(dir.join("none")).unwrap_err().to_string();
        assert!(
            err.contains(&dir.join("none").display().to_string()),
            "{err}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
