//! The bounded GET against real loopback servers: the body, the body cap, a non-200 status,
//! a bad URL and a server that never answers.
// A test target links every dependency of its package and uses a few of them.
#![allow(unused_crate_dependencies)]
use std::time::Duration;

use redirect_http::{get, spawn_on, Error, Limits, Request, Response, StatusCode};

async fn handler(req: Request) -> Response {
    match req.path.as_str() {
        "/metrics" => Response::prometheus("app_up 1\n".to_owned()),
        _ => Response::text(StatusCode::NOT_FOUND, "no\n"),
    }
}

#[tokio::test]
async fn fetches_within_the_caps_and_says_why_not() {
    let addr = spawn_on(
        &tokio::runtime::Handle::current(),
        "app",
        "127.0.0.1:0".parse().expect("addr"),
        Limits::default(),
        handler,
    )
    .expect("server");
    let wait = Duration::from_secs(5);
    let url = format!("http://{addr}/metrics");
    assert_eq!(get(&url, wait, 1024).await.expect("fetch"), "app_up 1\n");

    let capped = get(&url, wait, 4).await.expect_err("over the cap");
    assert!(capped.to_string().contains("at most 4 bytes"), "{capped}");
    let missing = get(&format!("http://{addr}/other"), wait, 1024)
        .await
        .expect_err("404");
    assert!(missing.to_string().contains("HTTP status 404"), "{missing}");
    for bad in ["https://x/", "ftp://x", "not a url"] {
        assert!(
            matches!(get(bad, wait, 1024).await, Err(Error::Url { .. })),
            "{bad}"
        );
    }

    // Connected (the kernel completes the handshake) but never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}/metrics", silent.local_addr().expect("addr"));
    let late = get(&url, Duration::from_millis(300), 1024)
        .await
        .expect_err("no answer");
    assert!(late.to_string().contains("no answer within"), "{late}");
}
