//! No part of a connection string's password reaches a message, and no
//! connection attempt waits forever: connection strings are parsed by a
//! real parser, refused without echoing any of their text, and a server
//! that accepts and never answers is `Unavailable` naming the timeout.
//! Needs no server: the attempts go to a closed port and to a silent
//! listener of the test's own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::net::TcpListener;
use std::time::Duration;

// Every substring of four or more characters of `secret` that `text`
// contains.
use custos_conformance::leaked_parts as leaks;
use custos_postgres::{ConnectError, Target};

/// Passwords built from every URL-special character, each between two
/// distinctive words.
fn passwords() -> Vec<String> {
    let specials = [
        "@", ":", "/", "#", "?", "%", "[", "]", " ", "@@", "%4", "%zz", ":@/", "?x=1", "#frag",
    ];
    specials
        .iter()
        .map(|c| format!("Hunter2{c}SecretTail"))
        .chain(["SecretTail", "a b@c:d/e?f#g[h]i%j"].map(str::to_owned))
        .collect()
}

fn percent_encoded(pw: &str) -> String {
    pw.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn check_no_leak(what: &str, text: &str, pw: &str) {
    let found = leaks(text, pw);
    assert!(
        found.is_empty(),
        "{what} shows {found:?} of the password: {text}"
    );
}

#[test]
fn no_part_of_a_password_reaches_any_message() {
    // Port 1 on loopback: the connection is refused at once.
    for pw in passwords() {
        for url in [
            format!("postgresql://custos:{pw}@127.0.0.1:1/custos"),
            format!(
                "postgresql://custos:{}@127.0.0.1:1/custos",
                percent_encoded(&pw)
            ),
            format!("postgres://custos:{pw}@127.0.0.1:1"),
            format!(
                "host=127.0.0.1 port=1 user=custos password='{}'",
                pw.replace('\'', "")
            ),
            // With TLS keys, which are taken out and the rest rewritten.
            format!(
                "postgresql://custos:{}@127.0.0.1:1/custos?sslmode=disable",
                percent_encoded(&pw)
            ),
            format!(
                "host=127.0.0.1 port=1 user=custos password='{}' sslmode=disable",
                pw.replace('\'', "\\'")
            ),
        ] {
            match Target::new(&url, "public") {
                Err(e) => {
                    check_no_leak("a refusal", &e.to_string(), &pw);
                    check_no_leak("a refusal's Debug", &format!("{e:?}"), &pw);
                    assert!(matches!(e, ConnectError::InvalidUrl { .. }), "{e}");
                }
                Ok(t) => {
                    check_no_leak("Debug", &format!("{t:?}"), &pw);
                    check_no_leak("the endpoint", &t.endpoint(), &pw);
                    let e = t.connect().err().expect("nothing listens on port 1");
                    check_no_leak("a connect failure", &e.to_string(), &pw);
                    check_no_leak("a connect failure's Debug", &format!("{e:?}"), &pw);
                }
            }
        }
    }
}

#[test]
fn taking_out_the_tls_keys_keeps_every_other_parameter() {
    for pw in passwords() {
        let kv = format!(
            "host=127.0.0.1 port=1 user=custos sslmode=require password='{}' dbname='a b'",
            pw.replace('\\', "\\\\").replace('\'', "\\'")
        );
        let cfg = custos_postgres::conn::parse_url(&kv).unwrap();
        assert_eq!(cfg.get_password(), Some(pw.as_bytes()), "{pw:?}");
        assert_eq!(cfg.get_dbname(), Some("a b"));
        let url = format!(
            "postgresql://custos:{}@127.0.0.1:1/custos?sslmode=require&application_name=a%20b%26c",
            percent_encoded(&pw)
        );
        let cfg = custos_postgres::conn::parse_url(&url).unwrap();
        assert_eq!(cfg.get_password(), Some(pw.as_bytes()), "{pw:?}");
        assert_eq!(cfg.get_application_name(), Some("a b&c"));
    }
    // A '+' in the query is a '+' (percent-decoding, not form-decoding),
    // with or without TLS keys beside it.
    for tls in ["", "&sslmode=disable"] {
        let cfg = custos_postgres::conn::parse_url(&format!(
            "postgresql://custos:a+b@127.0.0.1:1/custos?application_name=x+y{tls}"
        ))
        .unwrap();
        assert_eq!(cfg.get_password(), Some(b"a+b".as_slice()));
        assert_eq!(cfg.get_application_name(), Some("x+y"), "{tls}");
    }
}

#[test]
fn a_keyword_string_this_parser_cannot_read_is_refused() {
    // The client's own parser would read sslmode=require from it; ours
    // cannot, so it must not pass with TLS downgraded to `prefer`.
    for text in [
        "host=127.0.0.1 port=1 sslmode=require password=Hunter2SecretTail\\",
        "host=127.0.0.1 port=1 sslmode=require password='unterminated",
    ] {
        let e = Target::new(text, "public").unwrap_err();
        assert!(matches!(e, ConnectError::InvalidUrl { .. }), "{e}");
        check_no_leak("a refusal", &e.to_string(), "Hunter2SecretTail");
    }
}

#[test]
fn a_percent_encoded_password_is_decoded_and_a_spilled_one_refused() {
    let pw = "Hunter2@Secret/Tail?#";
    let t = Target::new(
        format!(
            "postgresql://custos:{}@127.0.0.1:1/custos",
            percent_encoded(pw)
        ),
        "public",
    )
    .unwrap();
    assert_eq!(t.endpoint(), "127.0.0.1:1/custos");
    // A '/' in a raw password ends the authority early: the rest would be
    // read as the database name. Refused, naming no part of it.
    let e = Target::new(
        "postgresql://custos:1234/SecretTail@127.0.0.1/custos",
        "public",
    )
    .unwrap_err();
    check_no_leak("a refusal", &e.to_string(), "1234/SecretTail");
    // A raw '@' in the password: the last '@' ends the user information.
    let t = Target::new(
        "postgresql://custos:Hunter2@SecretTail@127.0.0.1:5433/custos",
        "public",
    )
    .unwrap();
    assert_eq!(t.endpoint(), "127.0.0.1:5433/custos");
}

#[test]
fn control_characters_in_a_database_name_are_escaped() {
    let t = Target::new("postgresql://u:p@127.0.0.1:1/a%0Ab%1Bc", "public").unwrap();
    let shown = t.endpoint();
    assert!(!shown.chars().any(char::is_control), "{shown:?}");
    let e = t.connect().err().unwrap().to_string();
    assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{e:?}");
}

/// A listener that accepts and never answers: the attempt ends within its
/// connect timeout, `Unavailable`, naming the timeout.
#[test]
fn a_silent_server_is_unavailable_within_the_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in listener.incoming().take(2) {
            kept.push(s);
        }
        std::thread::sleep(Duration::from_secs(30));
        drop(kept);
    });
    for url in [
        format!("postgresql://u:SecretTail@127.0.0.1:{port}/db?connect_timeout=1"),
        format!("postgresql://u:SecretTail@127.0.0.1:{port}/db"),
    ] {
        let t = Target::new(&url, "public").unwrap();
        let t = if url.contains("connect_timeout") {
            t
        } else {
            t.connect_timeout(Duration::from_millis(500))
        };
        // The harness's own bound, far above the timeout: a hang fails here.
        let (tx, rx) = std::sync::mpsc::channel();
        let attempt = t.clone();
        std::thread::spawn(move || {
            let _ = tx.send(attempt.connect().err());
        });
        let e = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the connection attempt ended")
            .expect("a silent server is not a connection");
        let text = e.to_string();
        assert!(matches!(e, ConnectError::Unavailable { .. }), "{text}");
        assert!(text.contains("connect timeout"), "{text}");
        check_no_leak("the timeout", &text, "SecretTail");
    }
    drop(held);
}

#[test]
fn the_waits_have_documented_defaults_and_the_string_overrides_them() {
    let t = Target::new("postgresql://u@127.0.0.1/db", "public").unwrap();
    assert_eq!(t.waits(), custos_postgres::conn::Waits::default());
    assert_eq!(
        t.waits().connect,
        custos_postgres::conn::DEFAULT_CONNECT_TIMEOUT
    );
    let t = Target::new(
        "postgresql://u@127.0.0.1/db?connect_timeout=7&tcp_user_timeout=9&keepalives_idle=11",
        "public",
    )
    .unwrap();
    assert_eq!(t.waits().connect, Duration::from_secs(7));
    assert_eq!(t.waits().tcp_user, Duration::from_secs(9));
    assert_eq!(t.waits().keepalive_idle, Duration::from_secs(11));
}
