//! The binary under test, run to its end: its output, and that output's
//! streams as text.

#![allow(dead_code)]

use std::fs::File;
use std::io::PipeWriter;
use std::process::{Command, Output, Stdio};

/// Runs the binary with `args` (inheriting the environment).
pub fn custos(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .output()
        .expect("custos runs")
}

/// Runs the binary with `args`, its standard output into `stdout` (its
/// standard error captured).
pub fn custos_into(args: &[&str], stdout: impl Into<Stdio>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .expect("custos runs")
}

/// A pipe whose read end is closed already: every write to it fails
/// (`EPIPE`). Closed before any child is spawned, so that no scheduling
/// lets a short output slip into the pipe's buffer first.
pub fn closed_pipe() -> PipeWriter {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    writer
}

/// `/dev/full`: every write to it fails (`ENOSPC`).
pub fn full_device() -> File {
    std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full opens")
}

/// `bytes` as text (lossy).
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// What the run printed on standard output.
pub fn stdout(o: &Output) -> String {
    text(&o.stdout)
}

/// What the run printed on standard error.
pub fn stderr(o: &Output) -> String {
    text(&o.stderr)
}
