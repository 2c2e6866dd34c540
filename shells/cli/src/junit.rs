//! `custos check --format junit`: the check's reports as JUnit XML, the
//! format CI systems (GitLab, Jenkins, GitHub test reporters, Buildkite)
//! show natively. Written by `quick-junit` (a maintained writer of exactly
//! this format) rather than by hand: escaping and the schema's attribute
//! rules are its job.
//!
//! One `<testsuite>` per model; in it one `<testcase>` per property
//! (`property <name>`: fails when an `always` property has a
//! counterexample within the bound, or a `sometimes` one was never
//! reached), one per mutant (`mutant <name>`: fails when it survived, i.e.
//! no property caught it), and one for the search itself (`exhaustive`:
//! fails when the search stopped before its bound). A failure's text holds
//! the shortest counterexample, step by step, as the text table prints it.

use std::time::Duration;

use custos_models::ModelReport;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

/// A failing status with `message` and, when there is one, the
/// counterexample as its text.
fn failure(message: String, description: Option<String>) -> TestCaseStatus {
    let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
    status.set_message(message);
    if let Some(d) = description {
        status.set_description(d);
    }
    status
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or_default()
}

/// One model's test suite.
fn suite(r: &ModelReport) -> TestSuite {
    let mut suite = TestSuite::new(format!("custos check {}", r.model));
    suite.set_time(seconds(r.seconds));
    for p in &r.properties {
        let status = if p.held {
            TestCaseStatus::success()
        } else if p.kind == "sometimes" {
            failure(
                format!("`{}` was never reached within the bound", p.name),
                None,
            )
        } else {
            failure(
                format!(
                    "`{}` has a counterexample of {} steps",
                    p.name,
                    p.counterexample_len.unwrap_or(0)
                ),
                p.trace.as_ref().map(|t| t.render()),
            )
        };
        let mut case = TestCase::new(format!("property {}", p.name), status);
        case.set_classname(r.model.clone());
        suite.add_test_case(case);
    }
    for m in &r.mutants {
        let status = if m.killed {
            TestCaseStatus::success()
        } else {
            failure(
                format!("mutant `{}` survived: no property caught it", m.name),
                None,
            )
        };
        let mut case = TestCase::new(format!("mutant {}", m.name), status);
        case.set_classname(r.model.clone());
        case.set_time(seconds(m.seconds));
        if let (Some(by), Some(trace)) = (&m.killed_by, &m.trace) {
            case.set_system_out(format!("killed by `{by}`\n{}", trace.render()));
        }
        suite.add_test_case(case);
    }
    let status = if r.exhaustive {
        TestCaseStatus::success()
    } else {
        failure(
            format!("the search did not finish within {}", r.bound_detail),
            None,
        )
    };
    let mut case = TestCase::new("exhaustive", status);
    case.set_classname(r.model.clone());
    suite.add_test_case(case);
    suite
}

/// The whole run as a JUnit XML document.
pub fn render(reports: &[ModelReport]) -> Result<String, String> {
    let mut report = Report::new("custos check");
    report.set_time(seconds(reports.iter().map(|r| r.seconds).sum()));
    report.add_test_suites(reports.iter().map(suite));
    report.to_string().map_err(|e| e.to_string())
}
