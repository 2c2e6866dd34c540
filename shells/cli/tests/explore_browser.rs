//! The Explorer in a real browser: `custos explore lease --port 0` serves
//! stateright's Explorer, headless Chromium loads it and runs its
//! JavaScript, and the DOM it renders is held to the model. The initial page
//! lists every property of the lease model (taken from the model itself, not
//! typed here) with the model's name and the init state to choose, none of
//! which the static HTML carries; stepping into a successor through the
//! Explorer's URL fragment (`#/steps/<init>/<action>`) shows that action in
//! the path and that state in the state panel; a screenshot of the stepped
//! page is saved under the test's output directory. With the server gone the
//! same page shows none of it, so the assertions cannot pass without the live
//! Explorer.
//!
//! Chromium is driven by flags alone (`--dump-dom`, `--screenshot`,
//! `--virtual-time-budget`), each run with a fresh profile and HOME, killed
//! (its whole process group) after [`CHROMIUM_WAIT`]. A missing Chromium is
//! a loud failure naming the install command; `make servers` installs it.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::fmt::Debug;
use std::hash::Hash;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use custos_models::family::MutantModel;
use custos_models::lease::LeaseModel;
use custos_models::Bound;

/// How long one Chromium run may take before it is killed.
const CHROMIUM_WAIT: Duration = Duration::from_secs(60);
/// How long the Explorer may take to announce its address and answer.
const SERVE_WAIT: Duration = Duration::from_secs(30);
/// Virtual time Chromium grants the page's scripts and fetches (the
/// Explorer's fetches pause the virtual clock while they are pending).
const SCRIPT_BUDGET_MS: &str = "10000";
const INSTALL: &str = "install it with `apt-get install -y chromium` (or run `make servers`), \
                       or point CUSTOS_CHROMIUM at a Chromium binary";

/// A running `custos explore`, killed when dropped (so a failing assertion
/// still stops it).
struct Explorer {
    child: Child,
    addr: String,
}

impl Drop for Explorer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `custos explore <model> --port 0`, reads the announced address
/// from its stderr and waits until the Explorer answers there.
fn serve(model: &str) -> Explorer {
    let mut child = Command::new(env!("CARGO_BIN_EXE_custos"))
        .args(["explore", model, "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("custos explore starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut explorer = Explorer {
        child,
        addr: String::new(),
    };
    let (tx, rx) = mpsc::channel();
    // Forwards every stderr line (and keeps draining it, so the child never
    // blocks on a full pipe).
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + SERVE_WAIT;
    let announced = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("serving the Explorer") => break line,
            Ok(_) => {}
            Err(e) => panic!(
                "custos explore {model} announced no address within {SERVE_WAIT:?} ({e:?}); \
                 exit status so far: {:?}",
                explorer.child.try_wait()
            ),
        }
    };
    explorer.addr = announced
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no http:// address in {announced:?}"))
        .to_owned();
    let port: u16 = explorer
        .addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {announced:?}"));
    assert_ne!(port, 0, "port 0 was not resolved: {announced:?}");
    while get(&explorer.addr, "/.status").is_none() {
        assert!(
            Instant::now() < deadline,
            "the Explorer announced {} but did not answer /.status within {SERVE_WAIT:?}",
            explorer.addr
        );
        if let Ok(Some(status)) = explorer.child.try_wait() {
            panic!("custos explore exited ({status}) after announcing {announced:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    explorer
}

/// The body of `GET path` from `addr`, or `None` when nothing answers
/// with a 200 (bounded by socket timeouts).
fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(SERVE_WAIT)).ok()?;
    s.set_write_timeout(Some(SERVE_WAIT)).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200")
        .then(|| body.to_owned())
        .or_else(|| head.starts_with("HTTP/1.0 200").then(|| body.to_owned()))
}

/// The JSON the Explorer serves at `path`.
fn get_json(addr: &str, path: &str) -> serde_json::Value {
    let body = get(addr, path).unwrap_or_else(|| panic!("GET {path} from {addr} failed"));
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// `(expectation, name)` of every property of `M`, as the Explorer prints
/// them (`Always`, `Sometimes`), from the model itself.
fn properties_of<M>() -> Vec<(String, String)>
where
    M: MutantModel,
    M::State: Clone + Debug + Hash + PartialEq + Send + Sync,
    M::Action: Clone + Debug + PartialEq + Send + Sync,
{
    let model = M::at(Bound::Ci).unwrap_or_else(|e| panic!("{} builds: {e}", M::NAME));
    model
        .properties()
        .into_iter()
        .map(|p| (format!("{:?}", p.expectation), p.name.to_owned()))
        .collect()
}

/// How text appears in serialised HTML (a text node escapes these).
fn html(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\u{a0}', "&nbsp;")
}

/// The Chromium binary: `CUSTOS_CHROMIUM`, else `chromium` on `PATH`.
fn chromium_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("CUSTOS_CHROMIUM") {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "CUSTOS_CHROMIUM={} is not a file; {INSTALL}",
            bin.display()
        );
        return bin;
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("Chromium is missing: no `chromium` on PATH; {INSTALL}"))
}

/// Headless Chromium, one fresh profile per run.
struct Browser {
    bin: PathBuf,
    /// A private HOME (Chromium writes under it even with a profile dir).
    home: tempfile::TempDir,
}

/// One Chromium process group, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // The browser and its helpers share the group led by this child.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .status();
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

impl Browser {
    fn new() -> Self {
        Browser {
            bin: chromium_bin(),
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// Chromium's version line.
    fn version(&self) -> String {
        let (status, out, err) = self.run(&["--version"], None);
        assert!(
            status.success(),
            "{} --version: {status}: {err}",
            self.bin.display()
        );
        out.trim().to_owned()
    }

    /// Runs headless Chromium with `flags` on `url` (if any); returns its
    /// exit status, stdout and stderr. Killed after [`CHROMIUM_WAIT`].
    fn run(&self, flags: &[&str], url: Option<&str>) -> (ExitStatus, String, String) {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
        let mut cmd = Command::new(&self.bin);
        cmd.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--disable-extensions",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(flags)
        .args(url)
        .env("HOME", self.home.path())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0);
        let child = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => panic!(
                "Chromium ({}) does not start: {e}; {INSTALL}",
                self.bin.display()
            ),
        };
        let mut running = Running(child);
        let deadline = Instant::now() + CHROMIUM_WAIT;
        let status = loop {
            if let Some(status) = running.0.try_wait().unwrap() {
                break status;
            }
            if Instant::now() >= deadline {
                drop(running);
                panic!(
                    "Chromium hung: {flags:?} {url:?} did not finish within {CHROMIUM_WAIT:?} \
                     and was killed; its stderr ends:\n{}",
                    tail(&std::fs::read_to_string(&err_path).unwrap_or_default())
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        drop(running);
        let out = std::fs::read_to_string(&out_path).unwrap();
        let err = std::fs::read_to_string(&err_path).unwrap_or_default();
        (status, out, err)
    }

    /// The DOM of `url` after its scripts ran; Chromium must succeed.
    fn dom(&self, url: &str) -> String {
        let flags = [
            "--dump-dom",
            &format!("--virtual-time-budget={SCRIPT_BUDGET_MS}"),
        ];
        let (status, dom, err) = self.run(&flags, Some(url));
        assert!(
            status.success(),
            "Chromium on {url}: {status}\n{}",
            tail(&err)
        );
        assert!(
            !dom.is_empty(),
            "Chromium printed no DOM for {url}\n{}",
            tail(&err)
        );
        dom
    }

    /// A PNG screenshot of `url` written to `path`.
    fn screenshot(&self, url: &str, path: &Path) {
        let _ = std::fs::remove_file(path);
        let flags = [
            &format!("--screenshot={}", path.display()),
            "--window-size=1280,1000",
            "--hide-scrollbars",
            &format!("--virtual-time-budget={SCRIPT_BUDGET_MS}"),
        ];
        let (status, _, err) = self.run(&flags, Some(url));
        assert!(
            status.success(),
            "Chromium screenshot of {url}: {status}\n{}",
            tail(&err)
        );
    }
}

/// The last lines of Chromium's stderr, without its D-Bus noise.
fn tail(err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains("dbus")).collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The text of the selected step's link in the path of actions (the one
/// whose link is `fragment` at offset 0).
fn selected_action(dom: &str, fragment: &str) -> Option<String> {
    let link = format!("class=\"font-code is-selected-state\" href=\"{fragment}?offset=0\"");
    let rest = &dom[dom.find(&link)?..];
    let text = &rest[..rest.find("</a>")?];
    Some(text[text.rfind('>')? + 1..].to_owned())
}

/// The initial page: everything in it below comes from the live server.
fn assert_initial_page(dom: &str, properties: &[(String, String)], init: &str) {
    for (expectation, name) in properties {
        let shown = html(&format!("{expectation} {name}"));
        assert!(
            dom.contains(&shown),
            "the Explorer lists no {shown:?}:\n{dom}"
        );
    }
    let model = std::any::type_name::<LeaseModel>()
        .rsplit("::")
        .next()
        .unwrap();
    assert!(
        dom.contains(&format!(">{model}</span>")),
        "no model name {model:?} from /.status:\n{dom}"
    );
    // The static page's placeholders were replaced by the status and steps.
    for placeholder in [
        "loading...",
        ">MODEL<",
        ">STATE COUNT<",
        ">NEXT<",
        ">PROPERTY<",
    ] {
        assert!(
            !dom.contains(placeholder),
            "placeholder {placeholder:?} left:\n{dom}"
        );
    }
    // The init state is offered as the first choice; none is selected yet.
    assert!(dom.contains(">Init 0</a>"), "no init state offered:\n{dom}");
    assert!(dom.contains("No state selected"), "{dom}");
    assert!(
        !dom.contains(&html(init)),
        "a state shown before one was chosen:\n{dom}"
    );
}

#[test]
fn the_explorer_renders_the_lease_model_and_steps_into_a_successor() {
    let browser = Browser::new();
    println!("chromium: {}", browser.version());
    let properties = properties_of::<LeaseModel>();
    assert!(!properties.is_empty());
    let explorer = serve(LeaseModel::NAME);
    let base = format!("http://{}/", explorer.addr);

    // What the server says the init state and its successors are.
    let inits = get_json(&explorer.addr, "/.states");
    let init = inits[0]["state"]
        .as_str()
        .expect("an init state")
        .to_owned();
    let successors = get_json(&explorer.addr, "/.states/0");
    let next = successors
        .as_array()
        .expect("successors")
        .iter()
        .filter(|s| s["state"].as_str().is_some_and(|st| st != init))
        // The one that changes most (the longest state; the first of a tie).
        .rev()
        .max_by_key(|s| s["state"].as_str().map_or(0, str::len))
        .expect("a successor that differs from the init state");
    let index = next["actionIndex"].as_u64().expect("an action index");
    let action = next["action"].as_str().expect("an action").to_owned();
    // The state panel shows the step's outcome, else its state.
    let shown = next["outcome"]
        .as_str()
        .or(next["state"].as_str())
        .unwrap()
        .to_owned();
    assert_ne!(shown, init);

    let dom = browser.dom(&base);
    assert_initial_page(&dom, &properties, &init);

    // Step in: init state 0, then the chosen action.
    let url = format!("{base}#/steps/0/{index}");
    let stepped = browser.dom(&url);
    assert_eq!(
        selected_action(&stepped, &format!("#/steps/0/{index}")),
        Some(html(&action)),
        "the path of actions does not end in {action:?}, selected:\n{stepped}"
    );
    assert!(
        stepped.contains(&html(&shown)),
        "the state panel does not show the state after {action:?}:\n{stepped}"
    );
    assert!(!stepped.contains("No state selected"), "{stepped}");
    assert!(
        !stepped.contains(&html(&init)),
        "still the init state:\n{stepped}"
    );
    println!("stepped into {url}: action {action}");

    let png = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("explore_browser/lease.png");
    std::fs::create_dir_all(png.parent().unwrap()).unwrap();
    browser.screenshot(&url, &png);
    let bytes =
        std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", png.display()));
    println!("screenshot: {} ({} bytes)", png.display(), bytes.len());
    assert!(
        bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
        "not a PNG: {}",
        png.display()
    );
    assert!(bytes.len() > 8, "an empty PNG");

    // The control: with the server gone, none of it is rendered.
    drop(explorer);
    let (_, gone, _) = browser.run(
        &[
            "--dump-dom",
            &format!("--virtual-time-budget={SCRIPT_BUDGET_MS}"),
        ],
        Some(&base),
    );
    for (expectation, name) in &properties {
        let shown = html(&format!("{expectation} {name}"));
        assert!(
            !gone.contains(&shown),
            "{shown:?} rendered with the server down:\n{gone}"
        );
    }
    assert!(!gone.contains(">Init 0</a>"), "{gone}");
}
