//! The README's "Tour" section is a transcript this test runs against the
//! real binary with `trycmd`, in an empty directory of its own: every
//! command, its exit status and everything it prints (stdout and stderr,
//! as a terminal shows them). `[CWD]` is that directory; `[..]` elides what
//! differs between runs. A command whose output changes fails here until
//! the README says what it now prints.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

/// The README's "Tour" section: from its heading to the next one.
fn tour_section() -> String {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .expect("the README");
    let start = readme
        .find("\n## Tour\n")
        .expect("the README has a Tour section");
    let rest = &readme[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 4);
    rest[..end].to_owned()
}

#[test]
fn the_readme_tour_is_what_the_binary_prints() {
    let tour = tour_section();
    // The tour covers every command group; a section that lost them (or
    // its transcript) cannot pass by running nothing.
    for group in [
        "demo",
        "catalog",
        "releases",
        "deployments",
        "migrate",
        "check",
    ] {
        assert!(
            tour.contains(&format!("\n$ custos {group} ")),
            "the tour runs no `custos {group}` command"
        );
    }
    let commands = tour.lines().filter(|l| l.starts_with("$ custos ")).count();
    assert!(commands >= 15, "only {commands} commands in the tour");
    assert_eq!(
        tour.matches("```console").count(),
        1,
        "the tour is one console block"
    );

    let dir = tempfile::tempdir().unwrap();
    let case = dir.path().join("tour.md");
    std::fs::write(&case, &tour).unwrap();
    // An `.out` directory beside the case runs it in a fresh sandbox (the
    // directory is empty: no file of the sandbox is compared).
    std::fs::create_dir(dir.path().join("tour.out")).unwrap();
    std::fs::write(dir.path().join("tour.out").join(".keep"), "").unwrap();
    trycmd::TestCases::new()
        .register_bin("custos", Path::new(env!("CARGO_BIN_EXE_custos")))
        .case(&case);
}
