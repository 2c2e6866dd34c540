//! The `custos` binary end to end: `check` prints a table and JSON whose
//! verdicts match the exit code; unknown models are refused; output to a
//! closed pipe or a full device ends with a documented code, never a panic;
//! numeric options are bounded; `explore` binds before it announces.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "support/binary.rs"]
mod binary;

use binary::{closed_pipe, custos, custos_into, full_device};

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

/// `custos check` of model `fence` with mutant `acquire-ignores-floor`
/// (a broken property), with `extra` arguments.
fn check_broken_fence(extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "check",
        "--model",
        "fence",
        "--mutant",
        "acquire-ignores-floor",
    ];
    args.extend_from_slice(extra);
    custos(&args)
}

#[test]
fn a_failing_property_prints_its_shortest_trace_step_by_step() {
    let out = check_broken_fence(&[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a broken property fails the check"
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let failed =
        "FAILED fence: always `epochs strictly increase per world, above every imported floor`";
    assert!(text.contains(failed), "{text}");
    // The shortest trace: import a floor, then acquire below it; each step
    // numbered, with the state places it changed.
    for line in [
        "counterexample to `epochs strictly increase per world, above every imported floor` in 2 steps:",
        "   0. initial state: SysState {",
        "   1. Import { w: 0, floor: 3 }",
        "        worlds[0].floor: 0 → 3",
        "   2. Acquire { w: 0, h: 2 }",
        "        worlds[0].issued: 0 → 1",
        "        ⇒ `epochs strictly increase per world, above every imported floor` no longer holds",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "missing {line:?}:\n{text}");
    }
    assert!(text.contains("model check FAILED"), "{text}");

    let out = check_broken_fence(&["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let props = doc["models"][0]["properties"].as_array().unwrap();
    let broken: Vec<_> = props.iter().filter(|p| p["held"] == false).collect();
    assert!(!broken.is_empty(), "{doc}");
    for p in broken.iter().filter(|p| p["kind"] == "always") {
        let steps = p["trace"]["steps"].as_array().unwrap();
        assert_eq!(
            steps.len() as u64,
            p["counterexample_len"].as_u64().unwrap(),
            "{p}"
        );
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(s["number"].as_u64(), Some(i as u64 + 1), "{p}");
            assert!(s["action"].is_string(), "{p}");
        }
    }
}

#[test]
fn a_mutant_s_killing_trace_is_in_the_json_and_the_mutant_name_is_checked() {
    let out = custos(&["check", "--model", "fence", "--json"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for m in doc["models"][0]["mutants"].as_array().unwrap() {
        let trace = &m["trace"];
        assert_eq!(trace["property"], m["killed_by"], "{m}");
        let actions: Vec<_> = trace["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["action"].clone())
            .collect();
        assert_eq!(
            serde_json::Value::Array(actions),
            m["counterexample"],
            "{m}"
        );
        // The last step changed something the property reads.
        let last = trace["steps"].as_array().unwrap().last().unwrap();
        assert!(!last["changes"].as_array().unwrap().is_empty(), "{m}");
    }
    let out = custos(&["check", "--model", "fence", "--mutant", "no-such-mutant"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no mutant named \"no-such-mutant\""), "{err}");
    let out = custos(&["check", "--mutant", "acquire-ignores-floor"]);
    assert_eq!(out.status.code(), Some(2), "--mutant needs --model");
}

#[test]
fn check_speaks_junit_one_case_per_property_and_mutant() {
    let out = custos(&["check", "--model", "fence", "--format", "junit"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let xml = String::from_utf8(out.stdout).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert!(
        xml.contains(r#"<testsuite name="custos check fence" tests="12""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<testcase name="mutant floor-import-lowers-epoch" classname="fence""#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<testcase name="exhaustive" classname="fence""#),
        "{xml}"
    );
    assert!(!xml.contains("<failure"), "{xml}");
    assert!(
        xml.contains("killed by `"),
        "a mutant's killing trace is in its output: {xml}"
    );

    // A failing check: the broken property is a failure whose text is the
    // counterexample, and the exit code says so.
    let out = check_broken_fence(&["--format", "junit"]);
    assert_eq!(out.status.code(), Some(1));
    let xml = String::from_utf8(out.stdout).unwrap();
    assert!(
        xml.contains(r#"<failure message="`epochs strictly increase per world, above every imported floor` has a counterexample of 2 steps""#),
        "{xml}"
    );
    assert!(xml.contains("   2. Acquire { w: 0, h: 2 }"), "{xml}");
    // JUnit on stdout; stderr carries only the progress line per model.
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "check: 1/1 fence (Ci bound)\n",
        "junit on stdout, only progress on stderr"
    );
}

#[test]
fn check_takes_a_list_of_models() {
    let out = custos(&["check", "--model", "fence,fence", "--json"]);
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["models"].as_array().unwrap().len(),
        1,
        "a model is checked once"
    );
    let out = custos(&["check", "--model", "fence,no-such-model"]);
    assert_eq!(out.status.code(), Some(2), "every name is checked");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no model named \"no-such-model\""), "{err}");
    let out = custos(&["check", "--model", "fence", "--format", "json", "--json"]);
    assert_eq!(out.status.code(), Some(2), "--json and --format conflict");
}

#[test]
fn completions_and_the_manual_page_name_every_command() {
    let out = custos(&["completions", "bash"]);
    assert!(out.status.success());
    let script = String::from_utf8(out.stdout).unwrap();
    for word in ["check", "models", "completions", "--format", "junit"] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    let out = custos(&["completions", "zsh"]);
    assert!(out.status.success());
    assert!(String::from_utf8(out.stdout)
        .unwrap()
        .contains("#compdef custos"));
    let out = custos(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.starts_with(".ie \\n(.g .ds Aq"), "{page}");
    assert!(page.contains(".TH custos 1"), "{page}");
    assert!(page.contains("check"), "{page}");
    let out = custos(&["completions", "no-such-shell"]);
    assert_eq!(out.status.code(), Some(2));
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

// ------------------------------------------------------------ output failures

/// How a run of `custos` ended when its stdout could not be written.
struct Ended {
    code: Option<i32>,
    stderr: String,
}

/// Runs `custos args` with stdout a pipe whose read end is closed before
/// the child writes: closed before the child is even spawned, so that no
/// scheduling lets a short output slip into the pipe's buffer first (the
/// `Stdio::piped()`-then-drop form raced on a loaded machine).
fn with_closed_stdout(args: &[&str]) -> Ended {
    ended(custos_into(args, closed_pipe()))
}

/// Runs `custos args` with stdout `/dev/full` (every write fails ENOSPC).
fn with_full_stdout(args: &[&str]) -> Ended {
    ended(custos_into(args, full_device()))
}

fn ended(out: std::process::Output) -> Ended {
    Ended {
        code: out.status.code(),
        stderr: binary::stderr(&out),
    }
}

/// A closed pipe ends quietly with 141 (128 + SIGPIPE); a full device with
/// 1 and one line on stderr; neither panics.
fn assert_output_failures_are_clean(args: &[&str]) {
    let e = with_closed_stdout(args);
    assert!(!e.stderr.contains("panicked"), "{args:?}: {}", e.stderr);
    assert_eq!(e.code, Some(141), "{args:?} on a closed pipe: {}", e.stderr);
    assert!(
        !e.stderr.contains("cannot write output"),
        "{args:?}: a broken pipe is quiet: {}",
        e.stderr
    );

    let e = with_full_stdout(args);
    assert!(!e.stderr.contains("panicked"), "{args:?}: {}", e.stderr);
    assert_eq!(e.code, Some(1), "{args:?} on /dev/full: {}", e.stderr);
    let lines: Vec<&str> = e
        .stderr
        .lines()
        .filter(|l| l.contains("cannot write output"))
        .collect();
    assert_eq!(lines.len(), 1, "{args:?}: {}", e.stderr);
    assert!(
        lines[0].starts_with("custos: cannot write output: "),
        "{}",
        lines[0]
    );
}

#[test]
fn models_survives_a_closed_pipe_and_a_full_device() {
    assert_output_failures_are_clean(&["models"]);
    assert_output_failures_are_clean(&["models", "--json"]);
    assert_output_failures_are_clean(&["completions", "bash"]);
    assert_output_failures_are_clean(&["man"]);
}

#[test]
fn check_survives_a_closed_pipe_and_a_full_device() {
    assert_output_failures_are_clean(&["check", "--model", "fence", "--json"]);
    assert_output_failures_are_clean(&["check", "--model", "fence"]);
    assert_output_failures_are_clean(&["check", "--model", "world", "--format", "junit"]);
}

#[test]
fn out_of_range_threads_are_a_usage_error() {
    for n in ["100000", "0", "257"] {
        let out = custos(&["check", "--model", "fence", "--threads", n]);
        assert_eq!(out.status.code(), Some(2), "--threads {n}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains("--threads"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn explore_refuses_a_port_it_cannot_bind_before_announcing_anything() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let out = custos(&["explore", "fence", "--port", &port]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("serving"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(err.contains("cannot listen"), "{err}");
}

#[test]
fn explore_on_port_zero_announces_the_real_port_and_serves_it() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["explore", "fence", "--port", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let read = BufReader::new(child.stderr.take().unwrap()).read_line(&mut line);
    let served = (|| {
        read.ok()?;
        let addr = line.split("http://").nth(1)?.split('/').next()?.to_owned();
        let port: u16 = addr.rsplit(':').next()?.parse().ok()?;
        // The Explorer answers on the announced address within a few seconds.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
                let _ = s.write_all(b"GET /.status HTTP/1.0\r\n\r\n");
                let mut body = String::new();
                let _ = s.read_to_string(&mut body);
                if body.starts_with("HTTP/1.") {
                    return Some(port);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    })();
    let _ = child.kill();
    let _ = child.wait();
    assert!(line.contains("serving"), "{line}");
    let port = served.unwrap_or_else(|| panic!("nothing served at the announced address: {line}"));
    assert_ne!(port, 0, "{line}");
}
