//! The `custos` binary end to end: `check` prints a table and JSON whose
//! verdicts match the exit code; unknown models are refused.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;

fn custos(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("custos runs")
}

#[test]
fn check_json_reports_every_property_and_mutant() {
    let out = custos(&["check", "--model", "fence", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], true);
    assert_eq!(v["bound"], "ci");
    let model = &v["models"][0];
    assert_eq!(model["model"], "fence");
    assert!(model["unique_states"].as_u64().unwrap() > 1000);
    assert_eq!(model["exhaustive"], true);
    let props = model["properties"].as_array().unwrap();
    assert!(props.iter().all(|p| p["held"] == true));
    assert!(props.iter().any(|p| p["kind"] == "sometimes"));
    let mutants = model["mutants"].as_array().unwrap();
    assert_eq!(mutants.len(), 3);
    for m in mutants {
        assert_eq!(m["killed"], true, "{m}");
        let len = m["counterexample_len"].as_u64().unwrap() as usize;
        assert_eq!(m["counterexample"].as_array().unwrap().len(), len);
    }
}

#[test]
fn check_table_names_columns_and_mutants() {
    let out = custos(&["check", "--model", "fence"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for col in [
        "model",
        "states",
        "unique",
        "depth",
        "seconds",
        "properties held",
        "mutants killed",
    ] {
        assert!(text.contains(col), "missing column {col}:\n{text}");
    }
    assert!(text.contains("8/8"), "{text}");
    assert!(text.contains("3/3"), "{text}");
    assert!(text.contains("floor-import-lowers-epoch"), "{text}");
    assert!(text.contains("all models passed"), "{text}");
}

#[test]
fn unknown_model_is_refused() {
    let out = custos(&["check", "--model", "no-such-model"]);
    assert_eq!(out.status.code(), Some(2));
    let out = custos(&["explore", "no-such-model", "--port", "1"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn models_lists_the_registry() {
    let out = custos(&["models", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap().to_string())
        .collect();
    assert!(names.contains(&"lease".to_string()));
    assert!(names.contains(&"fence".to_string()));
}
