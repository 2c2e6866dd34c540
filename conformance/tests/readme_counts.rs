//! The README's table of case counts is the suites' own: every row's count
//! is the length of that suite's case list (its reopen cases included), and
//! every suite has a row. On a mismatch the test names the rows that
//! differ; run it with `CUSTOS_BLESS_README=1` to write the counts.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use custos_conformance::{
    access, catalogue, control, control_admin, custody, deployment, ledger, objects, snapshot,
    storage, tables,
};

#[test]
fn the_readme_counts_every_suites_cases() {
    let suites: [(&str, usize); 11] = [
        (
            "storage_suite!",
            storage::STORAGE_CASES.len() + storage::STORAGE_REOPEN_CASES.len(),
        ),
        (
            "ledger_suite!",
            ledger::LEDGER_CASES.len() + ledger::LEDGER_REOPEN_CASES.len(),
        ),
        (
            "catalogue_suite!",
            catalogue::CATALOGUE_CASES.len() + catalogue::CATALOGUE_REOPEN_CASES.len(),
        ),
        (
            "custody_suite!",
            custody::CUSTODY_CASES.len() + custody::CUSTODY_REOPEN_CASES.len(),
        ),
        (
            "access_suite!",
            access::ACCESS_CASES.len() + access::ACCESS_REOPEN_CASES.len(),
        ),
        ("snapshot_suite!", snapshot::SNAPSHOT_CASES.len()),
        (
            "control_catalog_suite!",
            control::CONTROL_CATALOG_CASES.len() + control::CONTROL_CATALOG_REOPEN_CASES.len(),
        ),
        (
            "control_admin_suite!",
            control_admin::CONTROL_ADMIN_CASES.len()
                + control_admin::CONTROL_ADMIN_REOPEN_CASES.len(),
        ),
        ("object_store_suite!", objects::OBJECT_STORE_CASES.len()),
        ("table_store_suite!", tables::TABLE_STORE_CASES.len()),
        (
            "deployment_suite!",
            deployment::DEPLOYMENT_CASES.len() + deployment::DEPLOYMENT_REOPEN_CASES.len(),
        ),
    ];
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("the README");
    let mut wrong = Vec::new();
    let mut fixed = readme.clone();
    for (suite, cases) in suites {
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{suite}` |")))
            .unwrap_or_else(|| panic!("the README has no row for {suite}"));
        let stated: usize = row
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or_else(|| panic!("no count in {row:?}"));
        if stated != cases {
            wrong.push(format!(
                "{suite}: the README says {stated}, the suite has {cases}"
            ));
            let head = row.trim_end_matches('|').trim_end();
            let head = head.strip_suffix(&stated.to_string()).unwrap_or(head);
            fixed = fixed.replace(row, &format!("{head}{cases} |"));
        }
    }
    // `CUSTOS_BLESS_README=1` writes the suites' counts into the table.
    if !wrong.is_empty() && std::env::var_os("CUSTOS_BLESS_README").is_some() {
        std::fs::write(path, fixed).expect("rewrite the README");
        return;
    }
    assert!(
        wrong.is_empty(),
        "{}\n(CUSTOS_BLESS_README=1 writes the counts)",
        wrong.join("\n")
    );
}
